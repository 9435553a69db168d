# rnn_torch.py RNN_STEPS DIR [STEPS]: examples/lstm.dt and examples/gru.dt
# against torch's nn.LSTM and nn.GRU on the same weights. For each, builds
# torch's network (the recurrent layer and an nn.Linear head) with torch's
# default initialisation, writes its weights under the model's names
# (DIR/NAME.safetensors) and inputs (DIR/NAME/*.npy), runs RNN_STEPS on them
# and compares, against torch in float64: the forward's outputs (every
# step's h, the final h and, for the LSTM, c), then the losses of STEPS (20)
# SGD steps (mse of the head on every step plus 0.1 mean of the final
# state's square). Exit 0 when all agree within TOL relative, 1 otherwise.
# The same steps in float32 torch are printed beside, for comparison: the
# reference is float64, as float32 torch rounds too.
#
# TOL: each value is a float32 dot product of at most F + H + 2 = 15 terms
# of magnitude about 1, within (k + 2) 2^-23 ~ 2e-6 of its sum; the gates
# (sigmoid, tanh: slopes at most 1) do not grow it, and T = 6 steps add
# theirs, so 1e-5 of the largest magnitude bounds a step's outputs and the
# loss's terms. A step's weights move by lr = 0.1 times gradients of the
# same relative error, 2e-7 a step, 4e-6 after 20 and still within TOL (the
# losses move by less: they are smooth in the weights, slopes below 1).
import copy
import json
import os
import struct
import subprocess
import sys

import numpy as np
import torch
from torch import nn

T, B, F, H, C = 6, 4, 5, 8, 3   # lstm.dt's and gru.dt's dimensions
LR = 0.1                        # their optimizer: sgd(lr = 0.1)
TOL = 1e-5


def save_safetensors(path, tensors):
    """safetensors.torch.save_file without the package."""
    header, data, off = {}, b"", 0
    for name, t in tensors.items():
        raw = t.detach().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


class Net(nn.Module):
    """nn.LSTM or nn.GRU, then a linear head on every step's output."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(F, H)
        self.out = nn.Linear(H, C)

    def forward(self, xs, h0, c0):
        if self.kind == "lstm":
            ys, (h, c) = self.rnn(xs, (h0[None], c0[None]))
            return ys, h[0], c[0]
        ys, h = self.rnn(xs, h0[None])
        return ys, h[0], None

    def loss(self, xs, h0, c0, y):
        ys, h, c = self(xs, h0, c0)
        last = c if self.kind == "lstm" else h
        return nn.functional.mse_loss(self.out(ys), y) + 0.1 * (last * last).mean()


def to_dtc(net):
    """The weights under the model's names: x @ w_ih with w_ih [F, 4H] (LSTM)
    or [F, 3H] (GRU) is torch's x @ weight_ih_l0.t(), the gates in torch's
    order; the head's weight goes transposed too."""
    r = net.rnn
    return {"w_ih": r.weight_ih_l0.t(), "w_hh": r.weight_hh_l0.t(), "b_ih": r.bias_ih_l0,
            "b_hh": r.bias_hh_l0, "w_out": net.out.weight.t(), "b_out": net.out.bias}


def rel(got, want):
    want = np.asarray(want, dtype=np.float64).ravel()
    got = np.asarray(got, dtype=np.float64).ravel()
    return np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)


def check(kind, exe, out, steps):
    torch.manual_seed(1 if kind == "lstm" else 2)
    net = Net(kind)
    xs, h0, c0 = torch.randn(T, B, F), 0.5 * torch.randn(B, H), 0.5 * torch.randn(B, H)
    y = torch.randn(T, B, C)
    d = os.path.join(out, kind)
    os.makedirs(d, exist_ok=True)
    weights = os.path.join(out, kind + ".safetensors")
    save_safetensors(weights, {k: v.contiguous() for k, v in to_dtc(net).items()})
    arrays = {"xs": xs, "h0": h0, "y": y}
    if kind == "lstm":
        arrays["c0"] = c0
    for name, v in arrays.items():
        np.save(os.path.join(d, name + ".npy"), v.numpy().astype("<f4"))
    run = subprocess.run([exe, kind, weights, d, str(steps)], capture_output=True, text=True)
    if run.returncode:
        print(f"rnn_torch: {kind}: {exe} failed: {run.stderr.strip()}")
        return False
    got = {}
    losses = []
    for line in run.stdout.splitlines():
        w = line.split()
        if w[0] == "loss":
            losses.append(float(w[2]))
        else:
            got[w[0]] = [float(v) for v in w[1:]]
    net32 = copy.deepcopy(net)
    loss32 = []
    opt32 = torch.optim.SGD(net32.parameters(), lr=LR)
    for s in range(steps):
        loss = net32.loss(xs, h0, c0, y)
        loss32.append(loss.item())
        opt32.zero_grad()
        loss.backward()
        opt32.step()
    net = net.double()
    xs, h0, c0, y = xs.double(), h0.double(), c0.double(), y.double()
    ok = True
    with torch.no_grad():
        ys, h, c = net(xs, h0, c0)
    want = {"ys": ys, "h": h} | ({"c": c} if kind == "lstm" else {})
    report = []
    for name, v in want.items():
        e = rel(got.get(name, []), v.numpy()) if len(got.get(name, [])) == v.numel() else 1.0
        report.append(f"{name} {e:.2g}")
        if e > TOL:
            print(f"rnn_torch: {kind}: output {name} off by {e:.3g} relative > {TOL}")
            ok = False
    if len(losses) != steps:
        print(f"rnn_torch: {kind}: {len(losses)} losses, {steps} expected")
        return False
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    worst = worst32 = 0.0
    for s in range(steps):
        loss = net.loss(xs, h0, c0, y)
        e = abs(losses[s] - loss.item()) / abs(loss.item())
        worst = max(worst, e)
        worst32 = max(worst32, abs(loss32[s] - loss.item()) / abs(loss.item()))
        if e > TOL:
            print(f"rnn_torch: {kind}: step {s}: dtc loss {losses[s]:.9g}, torch "
                  f"{loss.item():.9g}, off by {e:.3g} relative > {TOL}")
            ok = False
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rnn_torch: {kind}: outputs {', '.join(report)}; {steps} losses "
          f"{losses[0]:.6g} .. {losses[-1]:.6g}, within {worst:.2g} relative of float64 "
          f"torch (float32 torch: {worst32:.2g})"
          + ("" if ok else ": FAIL"))
    return ok


def main():
    exe, out = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    os.makedirs(out, exist_ok=True)
    ok = check("lstm", exe, out, steps)
    ok = check("gru", exe, out, steps) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
