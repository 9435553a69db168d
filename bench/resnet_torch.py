# resnet_torch.py: the PyTorch baseline of bench/conv's ResNet: one training
# step of bench/resnet.dt's network written as PyTorch users write it (a
# BasicBlock module, torch.nn layers: the stem conv3x3 1->16, batch norm and
# ReLU, three stages of three BasicBlocks at 16, 32 and 64 channels whose
# first block of stages 2 and 3 has stride 2 and a 1x1 convolution with a
# batch norm as shortcut, adaptive average pooling, a linear layer; cross
# entropy, SGD with momentum 0.9 and weight decay 5e-4) at batch B, on random
# images and labels. Times steps as torch_steps.py says.
#
#     resnet_torch.py REPS THREADS B [serve]
#
# With `check`, it loads the params that resnet.dt's NAME_export wrote
# (EXPORT; names mapped as resnet.dt says), takes two training steps on
# the batch X (raw f32 [B, 1, 28, 28]) and Y (raw i32 [B]) and prints the
# loss of each, then the convolutions' GFLOP of one step counted from the
# network's own layers (2 multiply-adds per output element and kernel
# element, forward, weight gradient and, where the input needs one, input
# gradient):
#
#     resnet_torch.py check EXPORT X Y
import json
import re
import struct
import sys

import torch
import torch.nn.functional as F
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = self.shortcut_bn = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Conv2d(cin, cout, 1, stride, bias=False)
            self.shortcut_bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.shortcut is None else self.shortcut_bn(self.shortcut(x))))


class ResNet(nn.Module):
    def __init__(self, blocks=3, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = self.stage(16, 16, 1, blocks)
        self.layer2 = self.stage(16, 32, 2, blocks)
        self.layer3 = self.stage(32, 64, 2, blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, classes)

    @staticmethod
    def stage(cin, cout, stride, blocks):
        return nn.Sequential(BasicBlock(cin, cout, stride),
                             *(BasicBlock(cout, cout, 1) for _ in range(blocks - 1)))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        return self.fc(torch.flatten(self.pool(out), 1))


def load_export(path):
    """The tensors of a safetensors file, renamed from resnet.dt's names."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    state = {}
    for name, t in head.items():
        b, e = t["data_offsets"]
        v = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=torch.float32)
        name = re.sub(r"^layer(\d)_(\d+)\.", r"layer\1.\2.", name)
        if len(t["shape"]) == 4:   # a convolution's weight is named after it
            name += ".weight"
        state[name] = v.reshape(t["shape"])
    return state


def conv_flops(model, x):
    """The convolutions' FLOPs of one training step on x, from the layers."""
    total = [0.0]

    def hook(conv, inp, out):
        k = conv.in_channels // conv.groups * conv.kernel_size[0] * conv.kernel_size[1]
        one = 2.0 * out.numel() * k
        total[0] += one * (3 if inp[0].requires_grad else 2)

    hooks = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    model(x.requires_grad_(False))
    for h in hooks:
        h.remove()
    return total[0]


def make(threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = ResNet()
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)


if sys.argv[1] == "check":
    export, xpath, ypath = sys.argv[2:5]
    y = torch.frombuffer(bytearray(open(ypath, "rb").read()), dtype=torch.int32).long()
    x = torch.frombuffer(bytearray(open(xpath, "rb").read()),
                         dtype=torch.float32).reshape(len(y), 1, 28, 28)
    model, opt = make(2)
    model.load_state_dict(load_export(export))
    losses = []
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(f"{losses[0]:.7g} {losses[1]:.7g} {conv_flops(model, x) / 1e9:.7g}")
    sys.exit(0)

from torch_steps import run, train_step

reps, threads, B = (int(a) for a in sys.argv[1:4])
model, opt = make(threads)
x = torch.rand(B, 1, 28, 28)
y = torch.randint(0, 10, (B,))

run([train_step(model, opt, x, y)], reps, sys.argv[4:5] == ["serve"])
