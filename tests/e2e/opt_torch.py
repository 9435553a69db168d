# opt_torch.py STEPS TORCH_OPTIMIZER [CLIP] < opt_steps output: redoes the steps
# with torch.optim on the same data and initial weights, in float64 (with
# torch.nn.utils.clip_grad_norm_ to CLIP before each step), and checks
# dtc's weights after every step within 1e-4 of the largest weight and the
# losses within 1e-6 relative. Exit 0 when they agree, 1 with the worst
# differences otherwise.
import sys

import torch

steps, spec = int(sys.argv[1]), sys.argv[2]
clip = float(sys.argv[3]) if len(sys.argv) > 3 else 0
rows = [line.split() for line in sys.stdin if line.strip()]
val = {}
for r in rows[:3]:
    val[r[0]] = [float(v) for v in r[1:]]
losses = [float(r[1]) for r in rows[3:] if r[0] == "loss"]
ws = [[float(v) for v in r[1:]] for r in rows[3:] if r[0] == "w"]
x = torch.tensor(val["x"], dtype=torch.float64).reshape(4, 3)
y = torch.tensor(val["y"], dtype=torch.float64).reshape(4, 2)
w = torch.tensor(val["w0"], dtype=torch.float64).reshape(3, 2).requires_grad_()
opt = eval("torch.optim." + spec.replace("(", "([w], ", 1))
worst_w = worst_l = 0.0
for s in range(steps):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(x @ w, y)
    loss.backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_([w], clip)
    worst_l = max(worst_l, abs(loss.item() - losses[s]) / max(1e-30, abs(loss.item())))
    opt.step()
    ref = w.detach().reshape(-1)
    big = float(ref.abs().max())
    got = torch.tensor(ws[s], dtype=torch.float64)
    worst_w = max(worst_w, float((got - ref).abs().max()) / big)
ok = worst_w <= 1e-4 and worst_l <= 1e-6
print("%s: %d steps, weights within %.2g of the largest, losses within %.2g relative: %s"
      % (spec, steps, worst_w, worst_l, "agree" if ok else "DIFFER"))
sys.exit(0 if ok else 1)
