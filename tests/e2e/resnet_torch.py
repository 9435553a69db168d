# resnet_torch.py PORT_STEPS DIR [STEPS]: examples/resnet.dt against the
# same ResNet in PyTorch as torchvision builds it: torchvision's BasicBlock
# (conv3x3-bn-relu-conv3x3-bn, plus the input or its downsample, an
# nn.Sequential of a 1x1 convolution and a batch norm, then ReLU), stages
# of nn.Sequential, adaptive average pooling and an nn.Linear head, torch's
# default initialisation. Writes torch's initial weights and batch-norm
# buffers under the model's names (DIR/resnet.safetensors: stage 1's
# `layer1.L.` as they are, the slices of its loop's stacked tensors;
# `layer2.0.` is `layer2_0.` and `layer2.L.` the slice L - 1 of the loop of
# the others; `downsample.0.` and `.1.` are `downsample.` and
# `downsample_bn.`, num_batches_tracked has no counterpart) and S batches of
# random images and labels, runs PORT_STEPS, and trains the same STEPS (20)
# in float32 and float64 torch: batch norm in training mode, SGD with
# momentum 0.9 and weight decay 5e-4 at lr 0.1. Compares the initial logits
# (evaluation mode, the running statistics as loaded), every step's loss and
# the logits after training in evaluation mode, which read the running
# statistics the 20 steps updated (port_torch.compare). Exit 0 when they
# agree, 1 otherwise.
import os
import re
import sys

import torch
from torch import nn
from torch.nn import functional as F

from port_torch import compare, run_steps, save_batches, save_safetensors

B, S, K = 8, 8, 10          # resnet.dt's dimensions
LR, MOMENTUM, WD = 0.1, 0.9, 5e-4
BATCHES = 4


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.layer1 = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 8))
        down = nn.Sequential(nn.Conv2d(8, 16, 1, 2, bias=False), nn.BatchNorm2d(16))
        self.layer2 = nn.Sequential(BasicBlock(8, 16, 2, down), BasicBlock(16, 16),
                                    BasicBlock(16, 16))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, K)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def to_dtc(model):
    """The state dict under resnet.dt's names."""
    sd = {}
    for name, t in model.state_dict().items():
        if name.endswith("num_batches_tracked"):
            continue
        name = re.sub(r"^layer2\.0\.", "layer2_0.", name)
        name = re.sub(r"^layer2\.(\d)\.", lambda m: f"layer2.{int(m[1]) - 1}.", name)
        name = name.replace("downsample.0.", "downsample.").replace("downsample.1.",
                                                                    "downsample_bn.")
        sd[name] = t
    return sd


def train(model, batches, steps):
    """The losses of steps on batches in turn, and the evaluation's logits
    on batch 0 before and after."""
    x, y = batches
    model.eval()
    with torch.no_grad():
        out = {"logits0": model(x[0]).numpy(), "loss": []}
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    for it in range(steps):
        loss = F.cross_entropy(model(x[it % len(x)]), y[it % len(x)])
        out["loss"].append(loss.item())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        out["logits1"] = model(x[0]).numpy()
    return out


def main():
    exe, out = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    torch.manual_seed(7)
    model = ResNet()
    x = torch.randn(BATCHES, B, 3, S, S)
    y = torch.randint(0, K, (BATCHES, B))
    weights = os.path.join(out, "resnet.safetensors")
    save_safetensors(weights, to_dtc(model))
    save_batches(os.path.join(out, "data"), {"x": x, "y": y})
    got = run_steps(exe, "resnet", weights, os.path.join(out, "data"), steps)
    if got is None:
        return 1
    ref64 = ResNet().double()
    ref64.load_state_dict(model.state_dict())
    t64 = train(ref64, (x.double(), y), steps)
    t32 = train(model, (x, y), steps)
    return 0 if compare("resnet", got, t32, t64, 1e-4) else 1


if __name__ == "__main__":
    sys.exit(main())
