# attn_torch.py EXPR PARAMS < conv_grads output: evaluates the same
# scaled_dot_product_attention expression in torch, float64, on the same
# params (and inputs: an attn_mask, f32 added or i32 as torch's bool), takes
# the derivatives of sum(y * y) / 2 by torch.autograd, and checks dtc's
# result and derivatives against it: against
# torch.nn.functional.scaled_dot_product_attention where torch has it, and
# against the attention written out (softmax of the scores with torch's
# top-left causal mask, tril(ones(Tq, Tk))) always. With dropout_p (and a
# seed), only the attention written out, its dropout mask drawn here by
# dtc's stream (runtime/init.c's splitmix64 key, dtrt_k_dropout's rule over
# the whole [B, H, Tq, Tk]) at step 0, as conv_grads runs. A row that sees
# no key is zeros (torch 2.5's math kernel; NaN in older ones), so the
# written-out softmax gives such rows zeros. Tolerance, relative to the
# largest magnitude of each tensor: 8 (Tk + 2 D + 20) 2^-24, what sums of that
# length in float can do. Exit 0 when they agree, 1 otherwise.
import math
import sys

import torch
import torch.nn.functional as F

M64 = (1 << 64) - 1


def mix(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def dropout_keep(shape, p, seed, step=0):
    """dtc's dropout mask over a whole tensor of shape: 1 where kept."""
    key = mix(mix(seed & M64) ^ ((step * 0xd1b54a32d192ed03 + 0x8bb84b93962eacc9) & M64))
    cut = math.ceil(p * 16777216.0)
    n = 1
    for d in shape:
        n *= d
    keep = [1.0 if mix((key + (g + 1) * 0x9e3779b97f4a7c15) & M64) >> 40 >= cut else 0.0
            for g in range(n)]
    return torch.tensor(keep, dtype=torch.float64).reshape(shape)


def written_out(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                seed=None):
    s = query @ key.transpose(-2, -1) * (1 / math.sqrt(query.shape[-1]) if scale is None else scale)
    if is_causal:
        keep = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        s = s.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        s = s + attn_mask
    seen = (s > float("-inf")).any(dim=-1, keepdim=True)
    p = torch.softmax(s.masked_fill(~seen, 0), dim=-1).masked_fill(~seen, 0)
    if dropout_p > 0:
        p = p * dropout_keep(list(p.shape), dropout_p, seed) / (1 - dropout_p)
    return p @ value


def evaluate(expr, dims, params, inputs, fn):
    env = {}
    for name, v in params.items():
        d = [int(s) for s in dims[name].split(",")]
        env[name] = torch.tensor(v, dtype=torch.float64).reshape(d).requires_grad_()
    fixed = {}
    for name, v in inputs.items():
        kind, d = dims[name].split(":")
        t = torch.tensor(v, dtype=torch.float64).reshape([int(s) for s in d.split(",")])
        fixed[name] = t != 0 if kind == "i32" else t
    y = eval(expr, {"scaled_dot_product_attention": fn, "true": True, "false": False},
             dict(env, **fixed))
    (0.5 * (y * y).sum()).backward()
    want = {"y": y.detach().reshape(-1)}
    for name, t in env.items():
        want["d" + name] = t.grad.reshape(-1)
    return list(y.shape), want


expr = sys.argv[1]
params, inputs, got, shape = {}, {}, {}, None
for line in sys.stdin:
    f = line.split()
    if not f:
        continue
    if f[0] == "param":
        params[f[1]] = [float(v) for v in f[2:]]
    elif f[0] == "input":
        inputs[f[1]] = [float(v) for v in f[2:]]
    elif f[0] == "grad":
        got["d" + f[1]] = torch.tensor([float(v) for v in f[2:]], dtype=torch.float64)
    elif f[0] == "shape":
        shape = [int(v) for v in f[1:]]
    elif f[0] == "y":
        got["y"] = torch.tensor([float(v) for v in f[1:]], dtype=torch.float64)
dims = dict(a.split(":", 1) for a in sys.argv[2].split())
shapes = [[int(s) for s in d.split(",")] for n, d in dims.items() if n not in inputs]
shapes = [s for s in shapes if len(s) == 4]   # q, k, v (a mask may be a param)
tk = max(s[2] for s in shapes)
dh = shapes[0][3]
tol = 8 * (tk + 2 * dh + 20) * 2.0 ** -24
refs = [("written out", written_out)]
if "dropout_p" in expr or "seed" in expr:
    print("attn_torch: dropout: compared with the attention written out, dtc's mask redrawn here")
elif hasattr(F, "scaled_dot_product_attention"):
    refs.append(("F.scaled_dot_product_attention", F.scaled_dot_product_attention))
else:
    print("attn_torch: torch %s has no F.scaled_dot_product_attention (2.0 on): "
          "compared with the attention written out only" % torch.__version__)
ok = True
for label, fn in refs:
    tshape, want = evaluate(expr, dims, params, inputs, fn)
    if label != "written out" and bool(want["y"].isnan().any()):
        print("%s vs %s: skipped: this torch gives NaN for a row that sees no key" % (expr, label))
        continue
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
