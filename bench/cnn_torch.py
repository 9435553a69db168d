# cnn_torch.py: the PyTorch baseline of bench/conv's CNN: one training step
# of examples/cnn.dt written with torch (two 3x3 convolutions 1->16->32 with
# ReLU and 2x2 max pooling, a 1568-128-10 head, cross entropy; Adam with
# the cosine schedule over 5622 steps) at batch B, on random images and
# labels. Times steps as torch_steps.py says.
#
#     cnn_torch.py REPS THREADS B [serve]
import math
import sys

import torch

from torch_steps import run, train_step

reps, threads, B = (int(a) for a in sys.argv[1:4])
torch.set_num_threads(threads)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Flatten(), torch.nn.Linear(1568, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, 5622) / 5622)))
x = torch.rand(B, 1, 28, 28)
y = torch.randint(0, 10, (B,))

run([train_step(model, opt, x, y, sched)], reps, sys.argv[4:5] == ["serve"])
