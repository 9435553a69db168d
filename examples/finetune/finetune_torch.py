# finetune_torch.py FINETUNE DIR [STEPS]: PyTorch's side of examples/finetune.
# Builds finetune.dt's network as a torch user writes it (nn.Linear layers,
# an nn.ModuleList of residual layers) with torch's default initialisation,
# writes its weights under the model's names (DIR/weights.safetensors, by
# hand: the safetensors package is not needed) and a data set (DIR/x.npy,
# DIR/y.npy), runs the C program FINETUNE on them, trains the same STEPS
# steps in float64 and compares the losses. Exit 0 when they agree, 1
# otherwise.
#
# The tolerance is derived from the sums: a float32 dot product of k terms
# is within (k + 2) 2^-23 sum|terms| of the exact one, so each layer's error
# is that bound over |input| @ |W| + |b|, carried through the layers after
# it by their largest absolute row sum (relu and the residual add do not
# grow it); cross_entropy's derivative in the logits has an L1 norm of at
# most 2 per row, so the loss is off by at most twice the logits' bound
# (plus the rounding of its own log-sum-exp). Step s starts from params that
# s SGD updates have rounded, each by no more than a step's forward: the
# bound of step s is taken (s + 1) times.
import json
import os
import struct
import subprocess
import sys

import numpy as np
import torch
from torch import nn

I, H, C, L, B = 8, 16, 4, 3, 16   # finetune.dt's dimensions
LR = 0.1                          # its optimizer: sgd(lr = 0.1)
U = 2.0**-23


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(H, H)

    def forward(self, h):
        return h + torch.relu(self.lin(h))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(I, H)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.out = nn.Linear(H, C)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        for layer in self.layers:
            h = layer(h)
        return self.out(h)


def to_dtc(net):
    """The state_dict under finetune.dt's names: a dtc model computes x @ w
    with w [in, out], nn.Linear x @ weight.t() with weight [out, in], so each
    weight goes transposed; layers.i.w is row i of the stacked layers.w."""
    sd = {"w_in": net.inp.weight.t(), "b_in": net.inp.bias,
          "w_out": net.out.weight.t(), "b_out": net.out.bias}
    for i, layer in enumerate(net.layers):
        sd[f"layers.{i}.w"] = layer.lin.weight.t()
        sd[f"layers.{i}.b"] = layer.lin.bias
    return {k: v.detach().to(torch.float32).contiguous() for k, v in sd.items()}


def save_safetensors(path, tensors):
    """safetensors.torch.save_file without the package: an 8-byte
    little-endian header length, the JSON header, the raw data."""
    header, data, off = {}, b"", 0
    for name, t in tensors.items():
        raw = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def linear_bound(inp, lin, err_in):
    """The bound on the error of lin(inp) given err_in on inp."""
    w = lin.weight.detach()
    mag = inp.abs() @ w.abs().t() + lin.bias.detach().abs()
    carried = err_in * w.abs().sum(dim=1).max().item()
    return carried + (w.shape[1] + 2) * U * mag.max().item()


def loss_bound(net, x, loss):
    with torch.no_grad():
        h = torch.relu(net.inp(x))
        err = linear_bound(x, net.inp, 0.0)
        for layer in net.layers:
            err = err + linear_bound(h, layer.lin, err)
            h = layer(h)
        err = linear_bound(h, net.out, err)
    return 2 * err + (C + 2) * U * (abs(loss) + 1)


def main():
    exe, out = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(4 * B, I)
    y = torch.randint(0, C, (4 * B,), dtype=torch.int32)
    weights = os.path.join(out, "weights.safetensors")
    save_safetensors(weights, to_dtc(net))
    np.save(os.path.join(out, "x.npy"), x.numpy().astype("<f4"))
    np.save(os.path.join(out, "y.npy"), y.numpy().astype("<i4"))
    run = subprocess.run([exe, weights, os.path.join(out, "x.npy"),
                          os.path.join(out, "y.npy"), str(steps)],
                         capture_output=True, text=True)
    if run.returncode:
        print(f"finetune_torch: {exe} failed: {run.stderr.strip()}")
        return 1
    got = [float(line.split()[2]) for line in run.stdout.splitlines()
           if line.startswith("loss ")]
    if len(got) != steps:
        print(f"finetune_torch: {len(got)} losses from {exe}, {steps} expected")
        return 1
    net = net.double()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    worst, bad = 0.0, 0
    for s in range(steps):
        rows = [(s * B + r) % len(x) for r in range(B)]
        xb, yb = x[rows].double(), y[rows].long()
        loss = nn.functional.cross_entropy(net(xb), yb)
        tol = (s + 1) * loss_bound(net, xb, loss.item())
        diff = abs(got[s] - loss.item())
        worst = max(worst, diff / tol)
        if diff > tol:
            bad += 1
            print(f"step {s}: dtc loss {got[s]:.9g}, torch {loss.item():.9g}, "
                  f"off by {diff:.3g} > {tol:.3g}")
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"finetune_torch: {steps} steps from torch's weights, losses within "
          f"{worst:.2g} of their bounds" if not bad else "finetune_torch: FAIL")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
