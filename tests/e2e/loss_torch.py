# loss_torch.py TORCH_LOSS < loss_steps output: the loss and its gradient by
# PyTorch (float64) on the same z, y, t, against dtc's: the loss within 1e-6
# relative (or both NaN), dz within 1e-5 of its largest element (1e-6
# absolute when all zero). TORCH_LOSS is an expression of z, y, t and F
# (torch.nn.functional). Exit 0 when they agree, 1 otherwise.
import math
import sys

import torch
import torch.nn.functional as F

spec = sys.argv[1]
val = {r[0]: [float(v) for v in r[1:]] for r in (line.split() for line in sys.stdin) if r}
if "error" in val:
    print("%s: dtc failed" % spec)
    sys.exit(1)
z = torch.tensor(val["z"], dtype=torch.float64).reshape(6, 4).requires_grad_()
y = torch.tensor(val["y"], dtype=torch.float64).long()
t = torch.tensor(val["t"], dtype=torch.float64).reshape(6, 4)
loss = eval(spec)
loss.backward()
ref, got = loss.item(), val["loss"][0]
if math.isnan(ref) or math.isnan(got):
    dl = 0.0 if math.isnan(ref) and math.isnan(got) else math.inf
else:
    dl = abs(ref - got) / max(1e-30, abs(ref))
g = z.grad.reshape(-1)
big = float(g.abs().max())
dg = float((torch.tensor(val["dz"], dtype=torch.float64) - g).abs().max())
dg = dg / big if big > 0 else dg
ok = dl <= 1e-6 and dg <= (1e-5 if big > 0 else 1e-6)
print("%s: loss %.7g (torch %.7g), within %.2g relative; dz within %.2g: %s"
      % (spec, got, ref, dl, dg, "agree" if ok else "DIFFER"))
sys.exit(0 if ok else 1)
