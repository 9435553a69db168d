# mlp_torch.py: the PyTorch baseline of bench/mlp: one SGD-with-momentum training
# step of the 784-1024-1024-10 MLP at batch 256; prints the median step in ms.
import sys
import time

import torch

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
torch.set_num_threads(2)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(784, 1024), torch.nn.ReLU(),
    torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
    torch.nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.rand(256, 784)
y = torch.randint(0, 10, (256,))
loss_fn = torch.nn.CrossEntropyLoss()
times = []
for i in range(reps + 5):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    t1 = time.perf_counter()
    if i >= 5:
        times.append((t1 - t0) * 1e3)
times.sort()
print(f"{times[len(times) // 2]:.4f}")
