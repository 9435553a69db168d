# fn_torch.py TORCH_TERMS < loss_steps output: a function of torch against
# dtc's, value and gradient. TORCH_TERMS is an expression of z, t, y (the
# labels, int64), F
# (torch.nn.functional) and rms_norm whose sum is the loss dtc computed,
# evaluated in float64. The loss agrees within (24 + 16) 2^-24 of the sum of
# the terms' magnitudes (24 terms summed in float, a few roundings each before
# the sum); dz within 1e-5 of its largest element, some fifty times what a
# handful of float roundings per element can do (1e-6 absolute when all zero).
# Exit 0 when they agree, 1 otherwise.
import sys

import torch
import torch.nn.functional as F


def rms_norm(x, shape, weight=None, eps=None):
    """torch.nn.functional.rms_norm (torch 2.4) where torch has it, else its
    definition: x / sqrt(mean(x^2) + eps) over the trailing dims of shape."""
    eps = torch.finfo(torch.float32).eps if eps is None else eps
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, shape, weight, eps)
    dims = tuple(range(-len(shape), 0))
    y = x / torch.sqrt((x * x).mean(dims, keepdim=True) + eps)
    return y * weight if weight is not None else y


spec = sys.argv[1]
val = {r[0]: [float(v) for v in r[1:]] for r in (line.split() for line in sys.stdin) if r}
if "error" in val:
    print("%s: dtc failed" % spec)
    sys.exit(1)
z = torch.tensor(val["z"], dtype=torch.float64).reshape(6, 4).requires_grad_()
t = torch.tensor(val["t"], dtype=torch.float64).reshape(6, 4)
y = torch.tensor(val["y"], dtype=torch.float64).long()
terms = eval(spec)
loss = terms.sum()
loss.backward()
ref, got = loss.item(), val["loss"][0]
tol = (24 + 16) * 2.0**-24 * float(terms.abs().sum())
dl = abs(ref - got)
g = z.grad.reshape(-1)
big = float(g.abs().max())
dg = float((torch.tensor(val["dz"], dtype=torch.float64) - g).abs().max())
dg = dg / big if big > 0 else dg
ok = dl <= tol and dg <= (1e-5 if big > 0 else 1e-6)
print("%s: loss %.7g (torch %.7g), within %.2g (bound %.2g); dz within %.2g: %s"
      % (spec, got, ref, dl, tol, dg, "agree" if ok else "DIFFER"))
sys.exit(0 if ok else 1)
