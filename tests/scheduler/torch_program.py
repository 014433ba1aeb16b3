"""A PyTorch program on paramserver.torch as one task of srun or mpirun, for
scheduler_training_test.cc: `torch_program.py OUT_DIR`.

ps.init() takes the rank and the number of workers from the scheduler's
variables, the servers from $PS_SERVERS. The program trains a small model
for STEPS sync steps on data every task draws alike, each rank its share of
every step, and writes OUT_DIR/rank-RANK: a line "RANK SIZE", then the
weights after the broadcast and at the end, flattened, a line each, every
float exactly (repr).
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import paramserver.torch as ps

STEPS, BATCH = 10, 16
FEATURES, HIDDEN, CLASSES = 10, 16, 4


def flat(model):
    return " ".join(repr(v) for p in model.parameters()
                    for v in p.detach().flatten().tolist())


def main():
    out_dir = sys.argv[1]
    torch.set_num_threads(1)
    ps.init()
    # The ranks start apart; the broadcast gives them rank 0's weights.
    torch.manual_seed(7 + ps.rank())
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(),
                          nn.Linear(HIDDEN, CLASSES))
    ps.broadcast_parameters(model.state_dict(), root_rank=0)
    initial = flat(model)
    opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(STEPS * BATCH * ps.size(), FEATURES, generator=g)
    y = torch.randint(0, CLASSES, (len(x),), generator=g)
    for step in range(STEPS):
        begin = (step * ps.size() + ps.rank()) * BATCH
        opt.zero_grad()
        F.cross_entropy(model(x[begin:begin + BATCH]),
                        y[begin:begin + BATCH]).backward()
        opt.step()
    final = flat(model)
    rank, size = ps.rank(), ps.size()
    ps.shutdown()
    path = os.path.join(out_dir, "rank-%d" % rank)
    with open(path + ".tmp", "w") as out:
        out.write("%d %d\n%s\n%s\n" % (rank, size, initial, final))
    os.rename(path + ".tmp", path)


if __name__ == "__main__":
    main()
