# group_torch.py STEPS TORCH_OPTIMIZER [TORCH_SCHEDULER] < group_steps output:
# redoes the steps in float64 with torch.optim, the optimizer built from its
# text with w and b in scope (param groups as [{"params": [w]}, {"params":
# [b], "weight_decay": 0}]), and the scheduler, if given, from its text with
# the optimizer as `opt` (torch.optim.lr_scheduler; sched.step() after every
# opt.step()). Checks dtc's w and b after every step within 1e-5 of each
# tensor's largest value, and the losses within 1e-6 relative. The input is
# lines "NAME v1 v2 ...": x, y, w0, b0, then per step loss, w and b. Exit 0
# when they agree, 1 with the worst differences otherwise.
import sys
import warnings

import torch
from torch.optim import lr_scheduler  # noqa: F401 (for the scheduler's text)

steps, spec = int(sys.argv[1]), sys.argv[2]
sched_spec = sys.argv[3] if len(sys.argv) > 3 else ""
seq = []
for line in sys.stdin:
    if line.strip():
        r = line.split()
        seq.append((r[0], [float(v) for v in r[1:]]))
first = {n: v for n, v in reversed(seq)}
x = torch.tensor(first["x"], dtype=torch.float64).reshape(-1, 3)
y = torch.tensor(first["y"], dtype=torch.float64).reshape(-1, 2)
w = torch.tensor(first["w0"], dtype=torch.float64).reshape(3, 2).requires_grad_()
b = torch.tensor(first["b0"], dtype=torch.float64).requires_grad_()
# SequentialLR steps its next scheduler with an epoch, which torch deprecates
warnings.filterwarnings("ignore", category=UserWarning, module="torch.optim.lr_scheduler")
opt = eval("torch.optim." + spec)
sched = eval(sched_spec) if sched_spec else None
s = 0
worst_p = worst_l = 0.0
for name, v in seq:
    if name == "loss":
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(x @ w + b, y)
        loss.backward()
        worst_l = max(worst_l, abs(loss.item() - v[0]) / max(1e-30, abs(loss.item())))
        opt.step()
        if sched:
            sched.step()
        s += 1
    elif name in ("w", "b"):
        ref = (w if name == "w" else b).detach().reshape(-1)
        got = torch.tensor(v, dtype=torch.float64)
        worst_p = max(worst_p, float((got - ref).abs().max()) / float(ref.abs().max()))
ok = s == steps and worst_p <= 1e-5 and worst_l <= 1e-6
print("%s %s: %d steps, params within %.2g of the largest, losses within %.2g relative: %s"
      % (spec, sched_spec, s, worst_p, worst_l, "agree" if ok else "DIFFER"))
sys.exit(0 if ok else 1)
