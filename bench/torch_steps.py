# torch_steps.py: how bench/conv's PyTorch baselines time their steps
# (cnn_torch.py, resnet_torch.py, conv_torch.py import it). Each script has
# a list of steps; after 3 runs of each for warm-up, either REPS runs of
# each, printing per step a line of the median, shortest and longest in ms
# (as bench/gpt_torch.py), or, served (bench/conv runs them so, between
# its own steps), "ready", then for each line "N [I]" read from stdin the
# times in ms of N more runs of step I (default 0) on one line, until
# stdin closes.
import sys
import time

import torch.nn.functional as F


def train_step(model, opt, x, y, sched=None):
    """One training step of a classifier: cross entropy, backward, update."""
    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if sched is not None:
            sched.step()
    return step


def times(step, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def run(steps, reps, serve):
    for step in steps:
        times(step, 3)
    if serve:
        print("ready", flush=True)
        for line in sys.stdin:
            n, i = (int(a) for a in (line.split() + ["0"])[:2])
            print(" ".join(f"{t:.4f}" for t in times(steps[i], n)), flush=True)
        return
    for step in steps:
        t = sorted(times(step, reps))
        n = len(t)
        mid = t[n // 2] if n % 2 else (t[n // 2 - 1] + t[n // 2]) / 2
        print(f"{mid:.4f} {t[0]:.4f} {t[-1]:.4f}")
