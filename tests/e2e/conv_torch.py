# conv_torch.py EXPR < conv_grads output: evaluates the same expression with
# torch.nn.functional on the same params in float64, takes the derivatives
# of sum(y * y) / 2 by torch.autograd, and checks dtc's result and
# derivatives within 1e-4 of the largest magnitude of each. Exit 0 when they
# agree, 1 with the worst differences otherwise.
import sys

import torch
from torch.nn.functional import avg_pool2d, conv2d, max_pool2d, pad, relu


def flatten(input, start_dim=1, end_dim=-1):   # dtc's default start_dim is 1 (nn.Flatten)
    return torch.flatten(input, start_dim, end_dim)


true, false, none = True, False, None   # dtc's spelling
inf = float("inf")


expr = sys.argv[1]
params, got, shape = {}, {}, None
for line in sys.stdin:
    f = line.split()
    if not f:
        continue
    if f[0] == "param":
        params[f[1]] = [float(v) for v in f[2:]]
    elif f[0] == "grad":
        got["d" + f[1]] = torch.tensor([float(v) for v in f[2:]], dtype=torch.float64)
    elif f[0] == "shape":
        shape = [int(v) for v in f[1:]]
    elif f[0] == "y":
        got["y"] = torch.tensor([float(v) for v in f[1:]], dtype=torch.float64)
dims = dict(a.split(":") for a in sys.argv[2].split())
env = {}
for name, v in params.items():
    d = [int(s) for s in dims[name].split(",")]
    env[name] = torch.tensor(v, dtype=torch.float64).reshape(d).requires_grad_()
y = eval(expr, globals(), env)
(0.5 * (y * y).sum()).backward()
want = {"y": y.detach().reshape(-1)}
for name, t in env.items():
    want["d" + name] = t.grad.reshape(-1)
ok = list(y.shape) == shape
worst = {}
for k, w in want.items():
    g = got.get(k)
    if g is None or g.shape != w.shape:
        ok = False
        worst[k] = float("inf")
        continue
    worst[k] = float((g - w).abs().max()) / max(1e-30, float(w.abs().max()))
    ok = ok and worst[k] <= 1e-4
print("%s: shape %s (torch %s), %s: %s" % (expr, shape, list(y.shape),
      ", ".join("%s within %.2g" % kv for kv in worst.items()), "agree" if ok else "DIFFER"))
sys.exit(0 if ok else 1)
