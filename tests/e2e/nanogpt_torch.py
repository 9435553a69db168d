# nanogpt_torch.py PORT_STEPS DIR [STEPS]: examples/nanogpt.dt against
# nanoGPT's model as its model.py builds it (GPT of Blocks of
# CausalSelfAttention and MLP, LayerNorm with bias, the lm_head tied to the
# token embedding), initialised as its _init_weights does (normal 0.02,
# c_proj 0.02 / sqrt(2 n_layer), biases 0). Writes torch's initial weights
# under the model's names (DIR/nanogpt.safetensors: the state dict without
# `transformer.`, lm_head.weight being wte's) and S batches drawn as
# train.py's get_batch draws them, runs PORT_STEPS, and trains the same
# STEPS (20) in float32 and float64 torch as train.py does: AdamW over
# configure_optimizers' two groups (2-D params decay), betas (0.9, 0.95),
# clip_grad_norm_(1.0), the learning rate of each step from get_lr (its
# cosine decay to min_lr; the warm-up lr (it + 1) / W, dtc's and torch's
# LinearLR's, where nanoGPT's is (it + 1) / (W + 1)). Compares the initial
# logits, every step's loss and the logits after training
# (port_torch.compare). Exit 0 when they agree, 1 otherwise.
import math
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

from port_torch import compare, run_steps, save_batches, save_safetensors

B, T, V, D, H, L = 4, 16, 64, 32, 4, 2   # nanogpt.dt's dimensions
LR, MIN_LR, WARMUP, DECAY = 1e-2, 1e-3, 4, 20
WD, BETAS, CLIP = 0.1, (0.9, 0.95), 1.0
BATCHES = 20


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(D, 3 * D)
        self.c_proj = nn.Linear(D, D)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
        # model.py's attention without flash (torch before 2.0 has no
        # scaled_dot_product_attention)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = F.softmax(att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf")), dim=-1)
        y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(D, 4 * D)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * D, D)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(D)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, D), wpe=nn.Embedding(T, D),
            h=nn.ModuleList([Block() for _ in range(L)]), ln_f=nn.LayerNorm(D)))
        self.lm_head = nn.Linear(D, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * L))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.shape[1], dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1)

    def configure_optimizers(self):
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": WD},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=LR, betas=BETAS)


def get_lr(it):
    if it < WARMUP:
        return LR * (it + 1) / WARMUP
    if it > DECAY:
        return MIN_LR
    ratio = (it - WARMUP) / (DECAY - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def to_dtc(model):
    """The state dict under nanogpt.dt's names: lm_head.weight is wte's."""
    sd = {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" or name.endswith(".attn.bias"):   # tied; the mask
            continue
        name = name.removeprefix("transformer.")
        sd[{"wte.weight": "wte", "wpe.weight": "wpe"}.get(name, name)] = t
    return sd


def train(model, batches, steps):
    """train.py's loop on batches in turn: the loss of each step, and the
    logits on batch 0 before and after."""
    idx, targets = batches
    with torch.no_grad():
        out = {"logits0": model(idx[0])[0].numpy(), "loss": []}
    opt = model.configure_optimizers()
    for it in range(steps):
        for g in opt.param_groups:
            g["lr"] = get_lr(it)
        _, loss = model(idx[it % len(idx)], targets[it % len(idx)])
        out["loss"].append(loss.item())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
    with torch.no_grad():
        out["logits1"] = model(idx[0])[0].numpy()
    return out


def main():
    exe, out = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    torch.manual_seed(1337)
    model = GPT()
    # a stream with structure to learn (each token mostly the one before
    # plus 1), cut into batches at random offsets as get_batch does
    n = 2000
    data = torch.cumsum(1 + (torch.rand(n) < 0.2).long() * torch.randint(0, V, (n,)), 0) % V
    ix = torch.randint(n - T - 1, (BATCHES, B))
    idx = torch.stack([torch.stack([data[i:i + T] for i in row]) for row in ix])
    targets = torch.stack([torch.stack([data[i + 1:i + 1 + T] for i in row]) for row in ix])
    weights = os.path.join(out, "nanogpt.safetensors")
    save_safetensors(weights, to_dtc(model))
    save_batches(os.path.join(out, "data"), {"idx": idx, "targets": targets})
    got = run_steps(exe, "nanogpt", weights, os.path.join(out, "data"), steps)
    if got is None:
        return 1
    ref64 = GPT().double()
    ref64.load_state_dict(model.state_dict())
    t64 = train(ref64, (idx, targets), steps)
    t32 = train(model, (idx, targets), steps)
    return 0 if compare("nanogpt", got, t32, t64, 1e-4) else 1


if __name__ == "__main__":
    sys.exit(main())
