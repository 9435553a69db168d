# bn_torch.py EXPR PARAMS < bn_grads output: redoes with PyTorch, in float64,
# what bn_grads ran: the expression in training mode (torch.nn.functional.
# batch_norm with training=True, updating copies of the buffers), the
# derivatives of sum(y * y) / 2 by torch.autograd, the buffers after that
# step and after a second one on the same batch, and the expression in
# evaluation mode (training=False) on those. Each within 1e-4 of its largest
# magnitude; exit 0 when all agree, 1 with the worst differences otherwise.
import sys

import torch
import torch.nn.functional as F
from torch.nn.functional import conv2d, relu

training = True


def batch_norm(input, running_mean, running_var, weight=None, bias=None, momentum=0.1, eps=1e-5):
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def flatten(input, start_dim=1, end_dim=-1):
    return torch.flatten(input, start_dim, end_dim)


expr = sys.argv[1]
vals, bufs, got, shape = {}, {}, {}, None
for line in sys.stdin:
    f = line.split()
    if not f:
        continue
    v = [float(s) for s in f[2:]]
    if f[0] == "param":
        vals[f[1]] = v
    elif f[0] == "buffer":
        bufs[f[1]] = v
    elif f[0] in ("grad", "stats", "running"):
        got[f[0] + " " + f[1]] = torch.tensor(v, dtype=torch.float64)
    elif f[0] == "shape":
        shape = [int(s) for s in f[1:]]
    elif f[0] in ("y", "yeval"):
        got[f[0]] = torch.tensor([float(s) for s in f[1:]], dtype=torch.float64)
dims = dict(a.split(":") for a in sys.argv[2].replace("@", "").split())


def tensor(name, v):
    return torch.tensor(v, dtype=torch.float64).reshape([int(s) for s in dims[name].split(",")])


env = {n: tensor(n, v).requires_grad_() for n, v in vals.items()}
run = {n: tensor(n, v) for n, v in bufs.items()}
y = eval(expr, globals(), {**env, **run})
(0.5 * (y * y).sum()).backward()
want = {"y": y.detach().reshape(-1)}
for n, t in env.items():
    want["grad " + n] = t.grad.reshape(-1)
for n, t in run.items():
    want["stats " + n] = t.clone().reshape(-1)
with torch.no_grad():
    eval(expr, globals(), {**env, **run})   # the second step, on the same batch
    for n, t in run.items():
        want["running " + n] = t.clone().reshape(-1)
    training = False
    want["yeval"] = eval(expr, globals(), {**env, **run}).reshape(-1)
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
