# dlrm_torch.py: the PyTorch baseline of bench/dlrm.sh: bench/dlrm.dt's DLRM
# (a bottom MLP 13-32-D, 26 nn.EmbeddingBag(R, D, mode="sum", sparse=True)
# tables of a bag of one id each, the 351 pairwise dot products of the 27
# vectors, a top MLP (D + 351)-H-1, BCEWithLogitsLoss) trained by Adagrad
# (lr 0.01; sparse updates of the tables), on the same kind of batches as
# bench/dlrm.c: 8 fixed pseudo-random batches in turn. Prints the median step
# in ms over REPS steps after three warm-up steps.
# usage: dlrm_torch.py [REPS [THREADS [B R D H]]]
import sys
import time

import torch

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
B, R, D, H = (int(a) for a in sys.argv[3:7]) if len(sys.argv) > 6 else (384, 20000, 16, 64)
torch.manual_seed(0)


class DLRM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bottom = torch.nn.Sequential(torch.nn.Linear(13, 32), torch.nn.ReLU(),
                                          torch.nn.Linear(32, D), torch.nn.ReLU())
        self.tables = torch.nn.ModuleList(
            torch.nn.EmbeddingBag(R, D, mode="sum", sparse=True) for _ in range(26))
        for t in self.tables:
            torch.nn.init.normal_(t.weight, std=0.1)
        self.top = torch.nn.Sequential(torch.nn.Linear(D + 351, H), torch.nn.ReLU(),
                                       torch.nn.Linear(H, 1))
        self.iu = torch.triu_indices(27, 27, offset=1)

    def forward(self, dense, ids):
        x = self.bottom(dense)
        z = torch.stack([x] + [t(ids[:, k:k + 1]) for k, t in enumerate(self.tables)], dim=1)
        p = torch.bmm(z, z.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([x, p], dim=1))


model = DLRM()
opt = torch.optim.Adagrad(model.parameters(), lr=0.01)
loss_fn = torch.nn.BCEWithLogitsLoss()
batches = [(torch.rand(B, 13) * 4, torch.randint(0, R, (B, 26)),
            torch.randint(0, 2, (B, 1)).float()) for _ in range(8)]
times = []
for i in range(reps + 3):
    dense, ids, y = batches[i % 8]
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(dense, ids), y)
    loss.backward()
    opt.step()
    t1 = time.perf_counter()
    if i >= 3:
        times.append((t1 - t0) * 1e3)
times.sort()
n = len(times)
print(f"{(times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2):.4f}")
