# conv_torch.py: the PyTorch baseline of bench/conv's convolutions timed
# alone: for each shape N,C,H,W,O,K,STRIDE,PAD (input [N, C, H, W], weight
# [O, C, K, K], no bias), three steps: the forward (F.conv2d), the input
# gradient and the weight gradient, each by the call autograd makes for it
# (aten.convolution_backward with only that output asked for), on random
# tensors. Times steps as torch_steps.py says: step 3 s + 0, 1, 2 are shape
# s's forward, input and weight gradient.
#
#     conv_torch.py REPS THREADS [serve] SHAPE...
import sys

import torch
import torch.nn.functional as F

from torch_steps import run

reps, threads = int(sys.argv[1]), int(sys.argv[2])
serve = sys.argv[3:4] == ["serve"]
torch.set_num_threads(threads)
torch.manual_seed(0)
steps = []
for shape in sys.argv[3 + serve:]:
    n, c, h, w, o, k, s, p = (int(v) for v in shape.split(","))
    x, wt = torch.rand(n, c, h, w), torch.rand(o, c, k, k) - 0.5
    dy = torch.rand_like(F.conv2d(x, wt, None, s, p)) - 0.5

    def grad(x=x, wt=wt, dy=dy, s=s, p=p, mask=None):
        torch.ops.aten.convolution_backward(dy, x, wt, None, [s, s], [p, p], [1, 1], False,
                                            [0, 0], 1, mask)

    steps += [lambda x=x, wt=wt, s=s, p=p: F.conv2d(x, wt, None, s, p),
              lambda g=grad: g(mask=[True, False, False]),
              lambda g=grad: g(mask=[False, True, False])]
run(steps, reps, serve)
