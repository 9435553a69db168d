# mainjob_torch.py: the PyTorch baseline of bench/mainjob: examples/train_mlp.c's
# job written with torch on 2 threads: examples/mlp.dt (784-256-10, ReLU, glorot
# weights, zero biases, Adam lr 1e-3) or examples/cnn.dt (two 3x3 convolutions
# with ReLU and 2x2 max pooling, 1568-128-10, Adam lr 1e-3 under
# cosine(total = 5622)) on Fashion-MNIST at batch 64, each epoch in
# train_mlp's order (its seeded Fisher-Yates), the short last batch dropped,
# then the test accuracy. Prints what train_mlp --epoch-json prints: one JSON
# line per epoch, then "test accuracy P% after N steps".
#
#     mainjob_torch.py mlp|cnn EPOCHS [MAX_STEPS [DATA_DIR [SEED]]]
import gzip
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

kind = sys.argv[1]
epochs = int(sys.argv[2])
max_steps = int(sys.argv[3]) if len(sys.argv) > 3 else 0
data = sys.argv[4] if len(sys.argv) > 4 else "/usr/share/datasets/fashion-mnist"
seed = int(sys.argv[5]) if len(sys.argv) > 5 else 1
B = 64
torch.set_num_threads(2)
torch.manual_seed(seed)


def idx(name):
    with gzip.open(f"{data}/{name}", "rb") as f:
        raw = f.read()
    rank = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * k:8 + 4 * k], "big") for k in range(rank)]
    a = np.frombuffer(raw, np.uint8, offset=4 + 4 * rank).reshape(dims)
    if rank > 1:   # images: f32 / 255, flattened, as dtrt_read_idx and train_mlp
        return torch.from_numpy(a.reshape(dims[0], -1).astype(np.float32) / 255.0)
    return torch.from_numpy(a.astype(np.int64))


M64 = (1 << 64) - 1


def order(n, epoch):
    """train_mlp.c's shuffle: splitmix64 from seed * 1000003 + epoch, Fisher-Yates."""
    s = (seed * 1000003 + epoch) & M64
    idx_ = list(range(n))
    for i in range(n - 1, 0, -1):
        s = (s + 0x9E3779B97F4A7C15) & M64
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        j = z % (i + 1)
        idx_[i], idx_[j] = idx_[j], idx_[i]
    return torch.tensor(idx_, dtype=torch.int64)


def param(*shape, bound=None):
    """glorot (xavier_uniform_'s fans) or uniform(bound); a vector: zeros."""
    if len(shape) == 1:
        return torch.nn.Parameter(torch.zeros(shape))
    if bound is None:
        rf = math.prod(shape[2:]) if len(shape) > 2 else 1
        fan_in, fan_out = (shape[1] * rf, shape[0] * rf) if len(shape) > 2 else shape
        bound = math.sqrt(6.0 / (fan_in + fan_out))
    return torch.nn.Parameter(torch.empty(shape).uniform_(-bound, bound))


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1, self.b1 = param(784, 256), param(256)
        self.w2, self.b2 = param(256, 10), param(10)

    def forward(self, x):
        return F.relu(x @ self.w1 + self.b1) @ self.w2 + self.b2


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.k1, self.b1 = param(16, 1, 3, 3, bound=0.816), param(16)
        self.k2, self.b2 = param(32, 16, 3, 3, bound=0.204), param(32)
        self.w1, self.c1 = param(1568, 128), param(128)
        self.w2, self.c2 = param(128, 10), param(10)

    def forward(self, x):
        h = x.reshape(-1, 1, 28, 28)
        h = F.max_pool2d(F.relu(F.conv2d(h, self.k1, self.b1, padding=1)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, self.k2, self.b2, padding=1)), 2)
        h = F.relu(h.flatten(1) @ self.w1 + self.c1)
        return h @ self.w2 + self.c2


tr_x, tr_y = idx("train-images-idx3-ubyte.gz"), idx("train-labels-idx1-ubyte.gz")
te_x, te_y = idx("t10k-images-idx3-ubyte.gz"), idx("t10k-labels-idx1-ubyte.gz")
model = Mlp() if kind == "mlp" else Cnn()
opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
sched = None
if kind == "cnn":   # cosine(total = 5622): from lr at the first step to 0 at step 5622
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(1.0, s / 5622))))
n = tr_x.shape[0]
per_epoch = n // B
end = epochs * per_epoch
if max_steps and max_steps < end:
    end = max_steps
step = 0
while step < end:
    epoch = step // per_epoch
    perm = order(n, epoch)
    t0 = time.perf_counter()
    total, count = 0.0, 0
    for b in range(per_epoch):
        if step >= end:
            break
        rows = perm[b * B:(b + 1) * B]
        x, y = tr_x[rows], tr_y[rows]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if sched:
            sched.step()
        total += loss.item()
        count += 1
        step += 1
    s = time.perf_counter() - t0
    print(json.dumps({"epoch": epoch + 1, "steps": count, "ms": round(s * 1e3, 3),
                      "samples_per_s": round(count * B / s, 1),
                      "loss": round(total / count, 5)}), flush=True)
correct = 0
with torch.no_grad():
    for at in range(0, te_x.shape[0], B):
        correct += (model(te_x[at:at + B]).argmax(1) == te_y[at:at + B]).sum().item()
print(f"test accuracy {100 * correct / te_x.shape[0]:.2f}% after {step} steps")
