"""A Horovod elastic script on paramserver.torch, for
python_torch_elastic_test.py: `python_torch_elastic_program.py OUT_DIR
KILL_AT`. The equivalence scenario's training (python_torch_program.py)
written as Horovod's elastic examples are: @hvd.elastic.run, a TorchState
whose epoch and batch the loop assigns, a commit every step. Rank 1's first
incarnation kills itself with SIGKILL before global step KILL_AT; the
launcher restarts it.
"""

import os
import signal
import sys

import numpy as np
import torch
import torch.nn.functional as F

import paramserver
import paramserver.torch as hvd
import python_torch_program as program
from python_launch import report


def main():
    out_dir, kill_at = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    hvd.init()
    model = program.make_model(seed=7 if hvd.rank() == 0 else 100)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    wrapped, _ = program.make_optimizer("sgd", model)
    opt = hvd.DistributedOptimizer(wrapped,
                                   named_parameters=model.named_parameters())
    opt.num_examples = program.BATCH
    x, y = program.make_data(program.STEPS * program.BATCH * hvd.size())
    restarted = opt.resume_step > 0
    state = hvd.elastic.TorchState(model, opt, epoch=0, batch=0)
    found = {}

    @hvd.elastic.run
    def train(state):
        found["resumed_at"] = [state.epoch, state.batch]
        trained = 0
        for state.epoch in range(state.epoch, program.EPOCHS):
            for state.batch in range(state.batch, program.STEPS_PER_EPOCH):
                step = state.epoch * program.STEPS_PER_EPOCH + state.batch
                if hvd.rank() == 1 and not restarted and step == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                begin = (step * hvd.size() + hvd.rank()) * program.BATCH
                opt.zero_grad()
                F.cross_entropy(model(x[begin:begin + program.BATCH]),
                                y[begin:begin + program.BATCH]).backward()
                opt.step()
                trained += 1
                state.commit()
            state.batch = 0
        found["trained"] = trained

    train(state)
    # No step since the last commit: restore() gives its batch back.
    state.batch = 99
    state.restore()
    found["restored_batch"] = state.batch
    np.savez("%s/rank%d.npz" % (out_dir, hvd.rank()),
             **{n: p.detach().numpy() for n, p in model.named_parameters()})
    found["steps"] = opt.step_number
    found["restarted"] = restarted
    report(found)
    hvd.shutdown()


if __name__ == "__main__":
    main()
