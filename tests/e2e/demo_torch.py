"""demo_torch.py: DeMo (Peng, Quesnelle and Kingma, "Decoupled Momentum
Optimization", 2024), written here from the paper's algorithm and its
reference optimizer's semantics, against dtc's run of tests/mpi/demo_mlp.dt
as tests/mpi/demo_train.c prints it on stdin (ranks, initial params, then
per step the batch, the loss and the params after it).

The model and optimizer are demo_mlp.dt's: h = tanh(x @ w1 + b1), loss =
mse(h @ w2 + b2, y), demo(lr = 0.01, beta = 0.9, topk = 4, chunk = 8,
weight_decay = 0.1). With R ranks, rank r trains on rows [r B/R, (r+1) B/R)
of each batch, its own gradient (the mean over its rows, as DDP's no_sync
gives it) feeding its own momentum delta:

    p     *= 1 - lr wd
    delta  = beta delta + lr g
    C      = DCT-II (orthonormal) of delta by tiles (a 2-D param: c1 x c2
             tiles, c1 the largest divisor of its rows not above chunk, c2
             of its columns; 1-D: chunks of the largest divisor of n)
    keep the topk coefficients of largest magnitude in each tile
    delta -= IDCT(kept)
    avg    = per coefficient, the mean of what the ranks that sent it sent
    p     -= lr sign(IDCT(avg))

Rank r's gradient in dtc is the partial sum, 1/R of the mean over its rows;
DeMo's update does not change when every gradient is scaled by one factor.

sign() and the top-k choice amplify rounding without bound near a tie, so
the run must stay away from ties for the comparison to mean anything: at
every step and on every rank, the k-th and (k+1)-th magnitudes of each tile
differ by more than ETA times the tile's largest, and every element of
IDCT(avg) is larger than ETA times the param's largest or zero in exact
arithmetic (within 1e-12 of the tile's coefficient mass, as dtc counts it:
its kept cosines all vanish there, and both take sign 0). The data is checked
for it (a failure says "ill-conditioned", a flaw of the test's data, not of
dtc). ETA bounds what rounding can move: a gradient here is a sum over 8
rows, off by at most about (8 + 2) 2^-24 of its terms' magnitudes between
two summation orders, and the momentum carries such errors for about
1 / (1 - beta) = 10 steps, some 6e-6 in all, an eighth of ETA. Then the
params must agree within 1e-5 of their largest element after
every step, and the loss within 1e-5 max(1, |loss|). Exit 1 on a failure."""
import math
import sys

import numpy as np
import torch

LR, BETA, TOPK, CHUNK, WD = 0.01, 0.9, 4, 8, 0.1
NAMES = ["w1", "b1", "w2", "b2"]
SHAPES = {"w1": (12, 20), "b1": (20,), "w2": (20, 3), "b2": (3,)}
B, I, O = 8, 12, 3
ETA = 5e-5
TOL = 1e-5
ZERO = 1e-12   # runtime/kernels_demo.c's DEMO_ZERO


def largest_divisor(n, chunk):
    c = min(n, chunk)
    while c > 1 and n % c:
        c -= 1
    return max(c, 1)


def dct_matrix(n):
    k = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    d = np.cos(math.pi * (2 * j + 1) * k / (2 * n)) * math.sqrt(2.0 / n)
    d[0, :] = math.sqrt(1.0 / n)
    return torch.tensor(d, dtype=torch.float64)


class Tiles:
    def __init__(self, shape):
        self.shape = shape
        self.rows, self.cols = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, shape[0])
        self.c1 = largest_divisor(self.rows, CHUNK)
        self.c2 = largest_divisor(self.cols, CHUNK)
        self.ty, self.tx = self.rows // self.c1, self.cols // self.c2
        self.per = self.c1 * self.c2
        self.k = min(TOPK, self.per)
        self.d1, self.d2 = dct_matrix(self.c1), dct_matrix(self.c2)

    def encode(self, x):   # f32 tensor -> [tiles, c1 c2] f64
        t = x.double().reshape(self.ty, self.c1, self.tx, self.c2).permute(0, 2, 1, 3)
        c = self.d1 @ t @ self.d2.T
        return c.reshape(self.ty * self.tx, self.per)

    def decode(self, c):   # [tiles, c1 c2] f64 -> f64 tensor of the shape
        c = c.reshape(self.ty, self.tx, self.c1, self.c2)
        x = self.d1.T @ c @ self.d2
        return x.permute(0, 2, 1, 3).reshape(self.shape)


def read_run(lines):
    run = {"params": {}, "steps": []}
    cur = None
    for line in lines:
        f = line.split()
        if not f:
            continue
        if f[0] == "ranks":
            run["ranks"] = int(f[1])
        elif f[0] == "step":
            cur = {"params": {}}
            run["steps"].append(cur)
        elif f[0] == "param":
            v = torch.tensor([float(s) for s in f[3:]], dtype=torch.float32)
            v = v.reshape(SHAPES[f[1]])
            (cur or run)["params"][f[1]] = v
        else:
            cur[f[0]] = torch.tensor([float(s) for s in f[2:]], dtype=torch.float32)
    return run


def main():
    run = read_run(sys.stdin.read().splitlines())
    R = run["ranks"]
    p = {n: run["params"][n].clone() for n in NAMES}
    tiles = {n: Tiles(SHAPES[n]) for n in NAMES}
    delta = [{n: torch.zeros(SHAPES[n]) for n in NAMES} for _ in range(R)]
    ok, worst_gap, worst_sign = True, float("inf"), float("inf")
    for s, st in enumerate(run["steps"]):
        x, y = st["x"].reshape(B, I), st["y"].reshape(B, O)
        w = {n: p[n].clone().requires_grad_(True) for n in NAMES}
        out = torch.tanh(x @ w["w1"] + w["b1"]) @ w["w2"] + w["b2"]
        loss = float(((out - y) ** 2).mean())
        grads = []
        for r in range(R):
            lo, hi = r * B // R, (r + 1) * B // R
            wr = {n: p[n].clone().requires_grad_(True) for n in NAMES}
            o = torch.tanh(x[lo:hi] @ wr["w1"] + wr["b1"]) @ wr["w2"] + wr["b2"]
            ((o - y[lo:hi]) ** 2).mean().backward()
            grads.append({n: wr[n].grad for n in NAMES})
        for n in NAMES:
            t = tiles[n]
            p[n] = p[n] * (1 - LR * WD)
            total = torch.zeros(t.ty * t.tx, t.per, dtype=torch.float64)
            count = torch.zeros(t.ty * t.tx, t.per, dtype=torch.float64)
            for r in range(R):
                d = BETA * delta[r][n] + LR * grads[r][n]
                c = t.encode(d)
                mag = c.float().abs().double().numpy()
                kept = torch.zeros_like(c)
                for q in range(c.shape[0]):
                    order = np.lexsort((np.arange(t.per), -mag[q]))
                    if t.k < t.per:
                        gap = (mag[q][order[t.k - 1]] - mag[q][order[t.k]]) / mag[q].max()
                        worst_gap = min(worst_gap, gap)
                    for j in order[: t.k]:
                        kept[q, j] = float(np.float32(c[q, j]))
                        total[q, j] += kept[q, j]
                        count[q, j] += 1
                delta[r][n] = (d.double() - t.decode(kept)).float()
            avg = torch.where(count > 0, total / count.clamp(min=1), torch.zeros_like(total))
            u = t.decode(avg)
            # zero in exact arithmetic where the kept cosines all vanish
            # (the middle of an odd tile under odd frequencies): rounding
            mass = avg.abs().sum(dim=1).reshape(t.ty, t.tx, 1, 1)
            mass = mass.expand(t.ty, t.tx, t.c1, t.c2).permute(0, 2, 1, 3).reshape(t.shape)
            u = torch.where(u.abs() > ZERO * mass, u, torch.zeros_like(u))
            live = u[u != 0].abs()
            worst_sign = min(worst_sign, float(live.min() / live.max()))
            p[n] = p[n] - LR * torch.sign(u).float()
        got = float(st["loss"][0])
        if abs(got - loss) > TOL * max(1.0, abs(loss)):
            print(f"demo_torch: step {s}: loss {got:.9g}, reference {loss:.9g}")
            ok = False
        for n in NAMES:
            diff = float((st["params"][n] - p[n]).abs().max())
            big = float(p[n].abs().max())
            if diff > TOL * big:
                print(f"demo_torch: step {s}: '{n}' differs by {diff:.3g}, "
                      f"{diff / big:.3g} of its largest element {big:.3g}")
                ok = False
    print(f"demo_torch: {R} rank(s), {len(run['steps'])} steps: smallest top-k gap "
          f"{worst_gap:.3g}, smallest |IDCT(avg)| {worst_sign:.3g} of the largest")
    if worst_gap <= ETA or worst_sign <= ETA:
        print(f"demo_torch: ill-conditioned data: a top-k choice or a sign within {ETA} of a tie")
        ok = False
    if len(run["steps"]) != 10:
        print(f"demo_torch: {len(run['steps'])} steps, expected 10")
        ok = False
    print("demo_torch: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
