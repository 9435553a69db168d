# opt_torch.py STEPS TORCH_OPTIMIZER [CLIP [ACCUMULATE [WARMUP]]] < opt_steps,
# opt_set_lr or accum_steps output: redoes the steps with torch.optim on the
# same data and initial weights, in float64 (with torch.nn.utils.
# clip_grad_norm_ to CLIP before each optimizer step; 0: none), and checks
# dtc's weights after every step within 1e-4 of the largest weight and the
# losses within 1e-6 relative. With ACCUMULATE K each step is a micro-batch:
# (loss / K).backward(), and opt.step(); opt.zero_grad() after every K-th,
# as gradient accumulation is written in PyTorch. With WARMUP N the learning
# rate warms up over N optimizer steps (LambdaLR of min(1, (u + 1) / N) at
# update u, dtc's warmup schedule). The input is lines "NAME v1 v2 ...": w0
# (the initial weights), x and y (the batch of the steps that follow), lr
# (the learning rate from the next step on, set in every param group), then
# per step loss and w (the weights after it). Exit 0 when they agree, 1 with
# the worst differences otherwise.
import sys

import torch

steps, spec = int(sys.argv[1]), sys.argv[2]
clip = float(sys.argv[3]) if len(sys.argv) > 3 else 0
accum = int(sys.argv[4]) if len(sys.argv) > 4 else 1
warmup = int(sys.argv[5]) if len(sys.argv) > 5 else 0
rows = [line.split() for line in sys.stdin if line.strip()]
w0 = next([float(v) for v in r[1:]] for r in rows if r[0] == "w0")
w = torch.tensor(w0, dtype=torch.float64).reshape(3, 2).requires_grad_()
opt = eval("torch.optim." + spec.replace("(", "([w], ", 1))
sched = None
if warmup > 0:
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda u: min(1.0, (u + 1) / warmup))
x = y = None
s = 0
worst_w = worst_l = 0.0
for r in rows:
    v = [float(t) for t in r[1:]]
    if r[0] == "x":
        x = torch.tensor(v, dtype=torch.float64).reshape(-1, 3)
    elif r[0] == "y":
        y = torch.tensor(v, dtype=torch.float64).reshape(-1, 2)
    elif r[0] == "lr":
        for g in opt.param_groups:
            g["lr"] = v[0]
    elif r[0] == "loss":
        loss = torch.nn.functional.mse_loss(x @ w, y)
        (loss / accum).backward()
        worst_l = max(worst_l, abs(loss.item() - v[0]) / max(1e-30, abs(loss.item())))
        if (s + 1) % accum == 0:
            if clip > 0:
                torch.nn.utils.clip_grad_norm_([w], clip)
            opt.step()
            opt.zero_grad()
            if sched:
                sched.step()
    elif r[0] == "w":
        ref = w.detach().reshape(-1)
        big = float(ref.abs().max())
        got = torch.tensor(v, dtype=torch.float64)
        worst_w = max(worst_w, float((got - ref).abs().max()) / big)
        s += 1
ok = s == steps and worst_w <= 1e-4 and worst_l <= 1e-6
print("%s: %d steps, weights within %.2g of the largest, losses within %.2g relative: %s"
      % (spec, s, worst_w, worst_l, "agree" if ok else "DIFFER"))
sys.exit(0 if ok else 1)
