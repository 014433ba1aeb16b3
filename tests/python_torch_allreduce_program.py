"""A PyTorch worker on paramserver.torch in the launcher's --mode=allreduce,
for python_torch_allreduce_test.py:
`python_torch_allreduce_program.py SCENARIO OUT_DIR [ARGS]`.

The model, data and optimizer are python_torch_program's (functions of
fixed seeds); rank r's batch of step s is rows [(s * size + r) * BATCH,
+BATCH), so the ranks' batches of a step together are one process's batch
of BATCH * size.
"""

import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import paramserver.torch as ps
from python_launch import report
from python_torch_program import BATCH, make_data, make_model, make_optimizer

STEPS = 20


def equivalence(out_dir, optimizer_name, stop_at=None, every=None):
    """STEPS steps; saves, per step, the weights it started from and the
    ranks' mean gradient the step applied ("<step>/<name>/w", ".../g"), and
    the final weights. With `stop_at`, rank 1's first ring writes
    OUT_DIR/stopped before that step and waits to be killed; the restarted
    ring resumes from rank 0's checkpoint (every `every` steps)."""
    torch.set_num_threads(1)
    model = make_model(seed=7 if ps.rank() == 0 else 100 + ps.rank())
    ps.broadcast_parameters(model.state_dict(), root_rank=0)
    wrapped, _ = make_optimizer(optimizer_name, model)
    opt = ps.DistributedOptimizer(
        wrapped, named_parameters=model.named_parameters(),
        checkpoint_every_steps=int(every) if every else 200)
    # On the wrapper, as a user would; a resumed ring's scheduler catches up.
    scheduler = (torch.optim.lr_scheduler.StepLR(opt, 5, gamma=0.5)
                 if optimizer_name.endswith("+step") else None)
    start = opt.resume_step
    for _ in range(start if scheduler is not None else 0):
        scheduler.step()
    x, y = make_data(STEPS * BATCH * ps.size())
    saved = {}
    for step in range(start, STEPS):
        if (stop_at is not None and ps.rank() == 1 and start == 0 and
                step == int(stop_at)):
            open(os.path.join(out_dir, "stopped"), "w").close()
            time.sleep(3600)  # Until killed.
        for n, p in model.named_parameters():
            saved["%d/%s/w" % (step, n)] = p.detach().numpy().copy()
        begin = (step * ps.size() + ps.rank()) * BATCH
        opt.zero_grad()
        F.cross_entropy(model(x[begin:begin + BATCH]),
                        y[begin:begin + BATCH]).backward()
        opt.synchronize()
        for n, p in model.named_parameters():
            saved["%d/%s/g" % (step, n)] = p.grad.detach().numpy().copy()
        with opt.skip_synchronize():
            opt.step()
        if scheduler is not None:
            scheduler.step()
    for n, p in model.named_parameters():
        saved["final/%s" % n] = p.detach().numpy()
    np.savez(os.path.join(out_dir, "rank%d.npz" % ps.rank()), **saved)
    report({"mode": ps.mode(), "size": ps.size(), "steps": opt.step_number,
            "resumed_at": start, "lr": opt.param_groups[0]["lr"]})
    ps.shutdown()


def refusals(out_dir):
    """What the mode refuses, each caught and reported by its message."""
    model = make_model(seed=7)
    wrapped, _ = make_optimizer("sgd", model)
    found = {}
    try:
        ps.DistributedOptimizer(wrapped, compression=ps.Compression.fp16)
    except ValueError as e:
        found["fp16"] = str(e)
    try:
        ps.allreduce(torch.zeros(3))
    except NotImplementedError as e:
        found["allreduce"] = str(e)
    report(found)
    ps.shutdown()


if __name__ == "__main__":
    ps.init()
    {"equivalence": equivalence, "refusals": refusals}[sys.argv[1]](
        *sys.argv[2:])
