# sparse_torch.py STEPS DENSE SPARSE CALL < sparse_steps output: redoes the
# steps in float64 with torch on the same data and initial weights, the
# tables' gradients sparse (F.embedding_bag(..., sparse=True)): the dense
# param w stepped by torch.optim.DENSE, the tables e1 and e2 by
# torch.optim.SPARSE (each given the params, unless it lists its groups of
# p['e1'] and so on), or with SPARSE "rowwise_adagrad(lr=.., eps=..)" by a
# plain loop of FBGEMM's row-wise Adagrad (one sum of the mean of g^2 a
# row). CALL is the first table's lookup (ids, e1, sw in scope). Checks
# dtc's weights after every step within 1e-5 of each tensor's largest
# element and the losses within 1e-6 relative; exit 0 when they agree.
import sys

import torch
import torch.nn.functional as F

steps, dense, sparse, call = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
rows = [line.split() for line in sys.stdin if line.strip()]
shape = {"e1": (9, 5), "e2": (7, 5), "w": (10, 1)}
p = {}
for r in rows[:3]:
    p[r[0]] = torch.tensor([float(v) for v in r[1:]], dtype=torch.float64).reshape(shape[r[0]])
    p[r[0]].requires_grad_()
def optimizer(spec, params):
    """torch.optim.SPEC over params, or over the groups SPEC lists itself
    (p['e1'] and so on)."""
    return eval("torch.optim." + (spec if "p['" in spec else spec.replace("(", "(%s, " % params, 1)))


opt_d = optimizer(dense, "[p['w']]")
rowwise = sparse.startswith("rowwise_adagrad")
if rowwise:
    kw = eval("dict(" + sparse[sparse.index("(") + 1:])
    acc = {n: torch.zeros(shape[n][0], dtype=torch.float64) for n in ("e1", "e2")}
else:
    opt_s = optimizer(sparse, "[p['e1'], p['e2']]")


def rowwise_step():
    for n in ("e1", "e2"):
        g = p[n].grad.coalesce()
        idx, val = g.indices()[0], g.values()
        with torch.no_grad():
            for k in range(idx.numel()):
                r = int(idx[k])
                acc[n][r] += float((val[k] * val[k]).mean())
                p[n][r] -= kw["lr"] * val[k] / (acc[n][r].sqrt() + kw.get("eps", 1e-10))


batch = {}
s = 0
worst_w = worst_l = 0.0
seen = []
for r in rows[3:]:
    name = r[0]
    if name in ("ids", "flat", "offs"):
        batch[name] = torch.tensor([int(v) for v in r[1:]], dtype=torch.int64)
    elif name in ("sw", "y"):
        batch[name] = torch.tensor([float(v) for v in r[1:]], dtype=torch.float64)
    elif name == "loss":
        ids, sw = batch["ids"].reshape(4, 3), batch["sw"].reshape(4, 3)
        e1 = p["e1"]
        a = eval(call)
        c = F.embedding_bag(batch["flat"], p["e2"], batch["offs"], mode="mean", padding_idx=1,
                            sparse=True)
        loss = F.mse_loss(torch.cat([a, c], 1) @ p["w"], batch["y"].reshape(4, 1))
        opt_d.zero_grad()
        if rowwise:
            p["e1"].grad = p["e2"].grad = None
        else:
            opt_s.zero_grad()
        loss.backward()
        assert p["e1"].grad.is_sparse and p["e2"].grad.is_sparse
        worst_l = max(worst_l, abs(loss.item() - float(r[1])) / max(1e-30, abs(loss.item())))
        opt_d.step()
        rowwise_step() if rowwise else opt_s.step()
        seen = []
    else:
        ref = p[name].detach().reshape(-1)
        got = torch.tensor([float(v) for v in r[1:]], dtype=torch.float64)
        worst_w = max(worst_w, float((got - ref).abs().max()) / float(ref.abs().max()))
        seen.append(name)
        s += name == "w"
ok = s == steps and worst_w <= 1e-5 and worst_l <= 1e-6
print("%s + %s, %s: %d steps, weights within %.2g of the largest, losses within %.2g "
      "relative: %s" % (dense, sparse, call, s, worst_w, worst_l, "agree" if ok else "DIFFER"))
sys.exit(0 if ok else 1)
