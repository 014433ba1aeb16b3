"""A pipelined PyTorch worker (paramserver.torch.pipeline), for
python_torch_pipeline_test.py:
`python_torch_pipeline_program.py OUT_DIR STAGES MICRO_BATCHES SCHEDULE
[DIE_RANK DIE_STEP]`.

Every rank saves the whole model's weights after each step to
OUT_DIR/rank<R>.npz (keys "<step>/<name>"); the model and the data are
functions of fixed seeds, so the test redoes each step unsplit. With
DIE_RANK, that rank kills itself (SIGKILL) as step DIE_STEP begins.
$PIPELINE_PLACEMENT is DistributedOptimizer's placement ("server").
"""

import os
import signal
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import paramserver.torch as ps
from paramserver.torch.pipeline import Pipeline
from python_launch import report
# The data of python_torch_test's program (FEATURES inputs, CLASSES labels).
from python_torch_program import CLASSES, FEATURES, make_data

STEPS = 6
BATCH = 16  # Per replica; the unsplit step takes BATCH * replicas.
LR = 0.1
HIDDEN = 12


def make_model(seed=7):
    """Five children, three with parameters (Tanh: smooth, so that a
    rounding error never flips a derivative as ReLU's could)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(),
                         nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                         nn.Linear(HIDDEN, CLASSES))


def global_batch(x, y, step, replicas):
    """Step `step`'s rows of every replica, in replica order."""
    begin = step * BATCH * replicas
    return x[begin:begin + BATCH * replicas], y[begin:begin + BATCH *
                                                 replicas]


def main(out_dir, stages, micro_batches, schedule, die_rank=-1,
         die_step=-1):
    torch.set_num_threads(1)
    ps.init()
    pipe = Pipeline(make_model(), stages=stages,
                    micro_batches=micro_batches, schedule=schedule)
    opt = ps.DistributedOptimizer(
        torch.optim.SGD(pipe.parameters(), lr=LR),
        named_parameters=pipe.named_parameters(),
        backward_passes_per_step=pipe.micro_batches, planned_steps=STEPS,
        placement=os.environ.get("PIPELINE_PLACEMENT", "server"))
    x, y = make_data(STEPS * BATCH * pipe.replicas)
    saved = {"init/" + n: p.detach().numpy().copy()
             for n, p in pipe.named_parameters()}
    losses = []
    for step in range(STEPS):
        if ps.rank() == die_rank and step == die_step:
            os.kill(os.getpid(), signal.SIGKILL)
        xs, ys = global_batch(x, y, step, pipe.replicas)
        rows = slice(pipe.replica * BATCH, (pipe.replica + 1) * BATCH)
        opt.zero_grad()
        loss = pipe.train_step(xs[rows] if pipe.is_first else None,
                               ys[rows] if pipe.is_last else None,
                               F.cross_entropy)
        opt.step()
        if loss is not None:
            losses.append(loss)
        for n, p in pipe.named_parameters():
            saved["%d/%s" % (step, n)] = p.detach().numpy().copy()
    np.savez(os.path.join(out_dir, "rank%d.npz" % ps.rank()), **saved)
    report({"stage": pipe.stage, "replica": pipe.replica, "losses": losses,
            "placement": opt._placement,
            "own": [n for n, _ in pipe.stage_parameters()]})
    pipe.close()
    ps.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4],
         *[int(a) for a in sys.argv[5:]])
