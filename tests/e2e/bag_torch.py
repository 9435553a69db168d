# bag_torch.py TORCH_CALL: reads bag_steps' output on stdin and checks y and
# the gradients of sum(y * g) in w, sw and sw2 against TORCH_CALL, a
# torch.nn.functional.embedding_bag call on the same tensors (ids, flat,
# offs: int64; w, sw, sw2: float64). Each element's tolerance is that of a
# float sum of its terms: (n + 2) 2^-23 times the sum of their magnitudes,
# taken from the same call on |w|, |sw|, |sw2| and |g|; a gradient's, also
# the rounding of the step it is read off.
import sys

import torch
import torch.nn.functional as F

vals = {}
for line in sys.stdin:
    f = line.split()
    if f and f[0] == "error":
        sys.exit("bag_torch: dtc failed: " + line.strip())
    vals[f[0]] = [float(v) for v in f[1:]]

B, K, N, R, D = 4, 3, 10, 7, 5


def tensors(mag):
    t = {"ids": torch.tensor(vals["ids"], dtype=torch.int64).reshape(B, K),
         "flat": torch.tensor(vals["flat"], dtype=torch.int64),
         "offs": torch.tensor(vals["offs"], dtype=torch.int64)}
    for name, shape in (("w", (R, D)), ("sw", (N,)), ("sw2", (B, K))):
        v = torch.tensor(vals[name], dtype=torch.float64).reshape(shape)
        t[name] = (v.abs() if mag else v).requires_grad_()
    g = torch.tensor(vals["g"], dtype=torch.float64).reshape(B, D)
    return t, g.abs() if mag else g


def run(mag):
    t, g = tensors(mag)
    y = eval(sys.argv[1], {"F": F, "torch": torch}, t)
    (y * g).sum().backward()
    grads = {n: (t[n].grad if t[n].grad is not None else torch.zeros_like(t[n]))
             for n in ("w", "sw", "sw2")}
    return y.detach(), grads


y, grads = run(False)
ymag, gmag = run(True)
terms = max(K, N) + 2
fail = False
for name, want, mag in [("y", y, ymag)] + [("d" + n, grads[n], gmag[n]) for n in grads]:
    got = torch.tensor(vals[name], dtype=torch.float64).reshape(want.shape)
    tol = terms * 2.0 ** -23 * mag * (B if name != "y" else 1) + 1e-30
    if name != "y":   # read off p - (p - lr g) in float: its rounding too
        p = torch.tensor(vals[name[1:]], dtype=torch.float64).reshape(want.shape)
        tol = tol + 2.0 ** -22 * (p.abs() + want.abs())
    bad = (got - want).abs() > tol
    if bad.any():
        k = bad.nonzero()[0].tolist()
        print("bag_torch: %s: %s element %s: dtc %.9g, torch %.9g" %
              (sys.argv[1], name, k, got[tuple(k)].item(), want[tuple(k)].item()))
        fail = True
sys.exit(1 if fail else 0)
