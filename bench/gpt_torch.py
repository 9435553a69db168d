# gpt_torch.py: the PyTorch baseline of bench/gpt: one AdamW training step of
# examples/gpt.dt's model written with torch (token and position embeddings,
# L pre-norm blocks of causal multi-head attention with dropout on the output
# projection and a GELU MLP, a final norm, the head and cross entropy; AdamW
# with the cosine schedule's warm-up), on random token ids in [0, V).
# Prints the median, shortest and longest step in ms over REPS steps after 3
# of warm-up.
#
#     gpt_torch.py REPS THREADS B T D H V L
import math
import sys
import time

import torch
import torch.nn.functional as F

reps, threads, B, T, D, H, V, L = (int(a) for a in sys.argv[1:9])
torch.set_num_threads(threads)
torch.manual_seed(0)


def param(*shape, std=None, fill=None):
    if fill is not None:
        return torch.nn.Parameter(torch.full(shape, float(fill)))
    if std is None:   # glorot: uniform in +-sqrt(6 / (fan_in + fan_out))
        bound = math.sqrt(6.0 / (shape[-2] + shape[-1]))
        return torch.nn.Parameter(torch.empty(shape).uniform_(-bound, bound))
    return torch.nn.Parameter(torch.randn(shape) * std)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.g1, self.c1 = param(D, fill=1), param(D, fill=0)
        self.wq, self.wk, self.wv, self.wo = (param(D, D) for _ in range(4))
        self.g2, self.c2 = param(D, fill=1), param(D, fill=0)
        self.w_up, self.b_up = param(D, 4 * D), param(4 * D, fill=0)
        self.w_dn, self.b_dn = param(4 * D, D), param(D, fill=0)

    def forward(self, x, mask):
        a = F.layer_norm(x, (D,), self.g1, self.c1, 1e-5)
        q = (a @ self.wq).reshape(B, T, H, D // H).transpose(1, 2)
        k = (a @ self.wk).reshape(B, T, H, D // H).permute(0, 2, 3, 1)
        v = (a @ self.wv).reshape(B, T, H, D // H).transpose(1, 2)
        att = torch.softmax((q @ k / math.sqrt(D // H)).masked_fill(mask, -math.inf), dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, D)
        x2 = x + F.dropout(o @ self.wo, p=0.1, training=True)
        m = F.layer_norm(x2, (D,), self.g2, self.c2, 1e-5)
        return x2 + F.gelu(m @ self.w_up + self.b_up) @ self.w_dn + self.b_dn


class Gpt(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = param(V, D, std=0.02)
        self.pos = param(T, D, std=0.01)
        self.layers = torch.nn.ModuleList(Block() for _ in range(L))
        self.g3, self.c3 = param(D, fill=1), param(D, fill=0)
        self.w_out = param(D, V)
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1))

    def forward(self, ids, nxt):
        x = F.embedding(ids, self.tok) + self.pos
        for layer in self.layers:
            x = layer(x, self.mask)
        f = F.layer_norm(x, (D,), self.g3, self.c3, 1e-5)
        logits = (f @ self.w_out).reshape(B * T, V)
        return F.cross_entropy(logits, nxt.reshape(-1))


model = Gpt()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8,
                        weight_decay=0.01)
# gpt.dt's cosine(warmup = 100, total = 2000): these steps are all in the warm-up
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))
ids = torch.randint(0, V, (B, T))
nxt = torch.randint(0, V, (B, T))
times = []
for i in range(reps + 3):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = model(ids, nxt)
    loss.backward()
    opt.step()
    sched.step()
    t1 = time.perf_counter()
    if i >= 3:
        times.append((t1 - t0) * 1e3)
times.sort()
n = len(times)
mid = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
print(f"{mid:.4f} {times[0]:.4f} {times[-1]:.4f}")
