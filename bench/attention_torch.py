# attention_torch.py: the PyTorch baseline of bench/attention: one forward
# and backward of attention on random q, k, v [B, H, T, D] and dout, by
# F.scaled_dot_product_attention where the installed torch has it (2.0 on),
# else written out (softmax of the masked scores; the [T, T] scores stored
# for the backward). Served as torch_steps.py says, after a first line
# "ready IMPL" naming which of the two it runs.
#
#     attention_torch.py B H T D CAUSAL THREADS
import math
import sys

import torch
import torch.nn.functional as F

from torch_steps import times

b, h, t, d, causal, threads = (int(a) for a in sys.argv[1:7])
torch.set_num_threads(threads)
torch.manual_seed(0)
q, k, v = (torch.rand(b, h, t, d) - 0.5 for _ in range(3))
for x in (q, k, v):
    x.requires_grad_()
dout = torch.rand(b, h, t, d) - 0.5
keep = torch.ones(t, t, dtype=torch.bool).tril()


def written_out(q, k, v, is_causal):
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(d))
    if is_causal:
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


fn = getattr(F, "scaled_dot_product_attention", None)
impl = "F.scaled_dot_product_attention" if fn else "written_out"
fn = fn or written_out


def step():
    for x in (q, k, v):
        x.grad = None
    fn(q, k, v, is_causal=bool(causal)).backward(dout)


times(step, 3)
print("ready " + impl, flush=True)
for line in sys.stdin:
    print(" ".join(f"{ms:.4f}" for ms in times(step, int(line.split()[0]))), flush=True)
