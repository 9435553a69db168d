# attn_torch.py EXPR PARAMS < conv_grads output: evaluates the same
# scaled_dot_product_attention expression in torch, float64, on the same
# params, takes the derivatives of sum(y * y) / 2 by torch.autograd, and
# checks dtc's result and derivatives against it: against
# torch.nn.functional.scaled_dot_product_attention where torch has it, and
# against the attention written out (softmax of the scores with torch's
# top-left causal mask, tril(ones(Tq, Tk))) always. Tolerance, relative to the
# largest magnitude of each tensor: 8 (Tk + 2 D + 20) 2^-24, what sums of that
# length in float can do. Exit 0 when they agree, 1 otherwise.
import math
import sys

import torch
import torch.nn.functional as F


def written_out(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    assert attn_mask is None and dropout_p == 0
    s = query @ key.transpose(-2, -1) * (1 / math.sqrt(query.shape[-1]) if scale is None else scale)
    if is_causal:
        keep = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ value


def evaluate(expr, dims, params, fn):
    env = {}
    for name, v in params.items():
        d = [int(s) for s in dims[name].split(",")]
        env[name] = torch.tensor(v, dtype=torch.float64).reshape(d).requires_grad_()
    y = eval(expr, {"scaled_dot_product_attention": fn, "true": True, "false": False}, env)
    (0.5 * (y * y).sum()).backward()
    want = {"y": y.detach().reshape(-1)}
    for name, t in env.items():
        want["d" + name] = t.grad.reshape(-1)
    return list(y.shape), want


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
shapes = [[int(s) for s in d.split(",")] for d in dims.values()]
tk = max(s[2] for s in shapes)
dh = shapes[0][3]
tol = 8 * (tk + 2 * dh + 20) * 2.0 ** -24
refs = [("written out", written_out)]
if hasattr(F, "scaled_dot_product_attention"):
    refs.append(("F.scaled_dot_product_attention", F.scaled_dot_product_attention))
else:
    print("attn_torch: torch %s has no F.scaled_dot_product_attention (2.0 on): "
          "compared with the attention written out only" % torch.__version__)
ok = True
for label, fn in refs:
    tshape, want = evaluate(expr, dims, params, fn)
    worst = {}
    good = tshape == shape
    for k, w in want.items():
        g = got.get(k)
        if g is None or g.shape != w.shape:
            good = False
            worst[k] = float("inf")
            continue
        worst[k] = float((g - w).abs().max()) / max(1e-30, float(w.abs().max()))
        good = good and worst[k] <= tol
    print("%s vs %s: shape %s (torch %s), %s (tolerance %.2g): %s" % (
        expr, label, shape, tshape, ", ".join("%s within %.2g" % kv for kv in worst.items()),
        tol, "agree" if good else "DIFFER"))
    ok = ok and good
sys.exit(0 if ok else 1)
