"""A PyTorch worker program on paramserver.torch, for python_torch_test.py:
`python_torch_program.py SCENARIO OUT_DIR [ARGS]`.

Scenarios report with RESULT lines or .npz files in OUT_DIR; the test
judges them. The data and the initial model are functions of fixed seeds,
so the test can redo the same arithmetic in one process.
"""

import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import paramserver
import paramserver.torch as ps
from python_launch import report

STEPS = 20
EPOCHS, STEPS_PER_EPOCH = 4, 5  # The equivalence loop's STEPS.
BATCH = 32  # Per rank; the single-process reference uses BATCH * ranks.
FEATURES, HIDDEN, CLASSES = 10, 16, 4
# Below the model's gradient norms (0.18 to 0.36 over the 20 steps): the
# clipping scenarios clip every step.
CLIP_NORM = 0.05


def clip(model):
    """The edit the gradient-edit scenarios make between backward and
    step, as training scripts do."""
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)


def make_model(seed):
    """The equivalence tests' model; a function of `seed` alone."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(),
                         nn.Linear(HIDDEN, CLASSES))


def make_data(examples):
    """`examples` rows of (x, label), the same in every process."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(examples, FEATURES, generator=g)
    y = torch.randint(0, CLASSES, (examples,), generator=g)
    return x, y


def make_optimizer(name, model):
    """(optimizer, scheduler or None) for "sgd", "adam" or "sgd+step" (SGD
    whose learning rate StepLR halves every 5 steps). Weight decay on the
    weights only: biases go in a group without it, as the servers'
    per-tensor weight_decay flag allows."""
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    kind, _, schedule = name.partition("+")
    if kind == "sgd":
        opt = torch.optim.SGD([{"params": weights, "weight_decay": 0.01},
                               {"params": biases}], lr=0.1, momentum=0.9)
    else:
        opt = torch.optim.Adam([{"params": weights, "weight_decay": 0.01},
                                {"params": biases}], lr=0.01)
    return opt, (torch.optim.lr_scheduler.StepLR(opt, 5, gamma=0.5)
                 if schedule == "step" else None)


def equivalence(out_dir, optimizer_name, placement, stop_rank1_at=None):
    """STEPS steps at BATCH per rank; saves every rank's final weights.

    With `stop_rank1_at`, rank 1's first incarnation writes OUT_DIR/stopped
    before that step and waits to be killed; restarted, it resumes its
    epoch loop where the servers say it stopped."""
    model = make_model(seed=7 if ps.rank() == 0 else 100 + ps.rank())
    ps.broadcast_parameters(model.state_dict(), root_rank=0)
    wrapped, _ = make_optimizer(optimizer_name, model)
    opt = ps.DistributedOptimizer(wrapped,
                                  named_parameters=model.named_parameters(),
                                  placement=placement)
    # On the wrapper, as a user would: it shares the wrapped param_groups.
    scheduler = (torch.optim.lr_scheduler.StepLR(opt, 5, gamma=0.5)
                 if optimizer_name.endswith("+step") else None)
    x, y = make_data(STEPS * BATCH * ps.size())
    resumed_at = opt.resume_position(STEPS_PER_EPOCH)
    for epoch in range(resumed_at[0], EPOCHS):
        opt.set_epoch(epoch)
        first = resumed_at[1] if epoch == resumed_at[0] else 0
        for step in range(epoch * STEPS_PER_EPOCH + first,
                          (epoch + 1) * STEPS_PER_EPOCH):
            if (stop_rank1_at is not None and ps.rank() == 1 and
                    opt.resume_step == 0 and step == int(stop_rank1_at)):
                open("%s/stopped" % out_dir, "w").close()
                time.sleep(3600)  # Until killed.
            begin = (step * ps.size() + ps.rank()) * BATCH
            opt.zero_grad()
            F.cross_entropy(model(x[begin:begin + BATCH]),
                            y[begin:begin + BATCH]).backward()
            opt.step()
            if scheduler is not None:
                scheduler.step()
    np.savez("%s/rank%d.npz" % (out_dir, ps.rank()),
             **{n: p.detach().numpy() for n, p in model.named_parameters()})
    report({"placement": opt._placement, "steps": opt.step_number,
            "resumed_at": resumed_at, "lr": opt.param_groups[0]["lr"]})


def edits(out_dir, how, placement, passes, declared_passes):
    """Like equivalence with "sgd", but each step accumulates `passes`
    backward passes (DistributedOptimizer told `declared_passes`) and then
    `how`: "step"; "clip_pattern": synchronize(), clip, step() inside
    skip_synchronize() (Horovod's pattern); "clip_then_step": clip, step().
    A refused step raises: the job fails with the layer's message."""
    passes = int(passes)
    model = make_model(seed=7 if ps.rank() == 0 else 100 + ps.rank())
    ps.broadcast_parameters(model.state_dict(), root_rank=0)
    wrapped, _ = make_optimizer("sgd", model)
    opt = ps.DistributedOptimizer(
        wrapped, named_parameters=model.named_parameters(),
        placement=placement, backward_passes_per_step=int(declared_passes))
    x, y = make_data(STEPS * passes * BATCH * ps.size())
    for step in range(STEPS):
        opt.zero_grad()
        for j in range(passes):
            begin = ((step * passes + j) * ps.size() + ps.rank()) * BATCH
            F.cross_entropy(model(x[begin:begin + BATCH]),
                            y[begin:begin + BATCH]).backward()
        if how == "clip_pattern":
            opt.synchronize()
            clip(model)
            with opt.skip_synchronize():
                opt.step()
        elif how == "clip_then_step":
            clip(model)
            opt.step()
        else:
            opt.step()
    np.savez("%s/rank%d.npz" % (out_dir, ps.rank()),
             **{n: p.detach().numpy() for n, p in model.named_parameters()})
    report({"placement": opt._placement, "steps": opt.step_number,
            "class": type(opt).__name__,
            "is_sgd": isinstance(opt, torch.optim.SGD)})


class WithBuffers(nn.Module):
    """Trainable parameters, a frozen one, and BatchNorm's buffers (float
    running statistics and an int64 counter)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.norm = nn.BatchNorm1d(3)
        self.frozen = nn.Parameter(torch.randn(3), requires_grad=False)

    def forward(self, x):
        return self.norm(self.fc(x)) + self.frozen


def refusal(make):
    """The message of the ValueError DistributedOptimizer(make()) raises
    (before it declares anything), or None."""
    model = nn.Linear(2, 1)
    try:
        ps.DistributedOptimizer(make(model),
                                named_parameters=model.named_parameters())
    except ValueError as e:
        return str(e)
    return None


def declaration(out_dir):
    """Declares a model with buffers and a frozen parameter; reports what
    was declared, what every rank holds after the broadcast, what a late
    broadcast of an undeclared tensor gives, the error of a momentum
    change, and the optimizers placement='server' refuses."""
    torch.manual_seed(ps.rank())  # Every rank starts elsewhere.
    model = WithBuffers()
    model.norm.num_batches_tracked.fill_(3 + ps.rank())
    ps.broadcast_parameters(model.state_dict(), root_rank=0)
    refused = {
        "rmsprop": refusal(
            lambda m: torch.optim.RMSprop(m.parameters(), lr=0.1)),
        "nesterov": refusal(lambda m: torch.optim.SGD(
            m.parameters(), lr=0.1, momentum=0.9, nesterov=True)),
        "group_lrs": refusal(lambda m: torch.optim.SGD(
            [{"params": [m.weight]}, {"params": [m.bias], "lr": 0.2}],
            lr=0.1)),
        "amsgrad": refusal(lambda m: torch.optim.Adam(
            m.parameters(), amsgrad=True)),
    }
    opt = ps.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        named_parameters=model.named_parameters())
    after_broadcast = {n: t.tolist() for n, t in model.state_dict().items()}
    frozen = model.frozen.detach().clone()
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(ps.rank()))
    for _ in range(2):
        opt.zero_grad()
        model(x).square().sum().backward()
        opt.step()
    found = {
        "declared": [t.name for t in ps._state.client.model],
        "state": after_broadcast,
        "frozen_unchanged": bool(torch.equal(frozen, model.frozen)),
        "buffers_trained_locally": model.norm.num_batches_tracked.item(),
        "mode": ps.mode(),
        "refused": refused,
    }
    # After the declaration (as Horovod's benchmark does it): not declared,
    # so through the collectives; every rank gets rank 0's values.
    extra = torch.full((2,), float(ps.rank()))
    ps.broadcast_parameters([("extra", extra)])
    found["late_broadcast"] = extra.tolist()
    opt.param_groups[0]["momentum"] = 0.5
    try:
        opt.step()
    except paramserver.Error as e:
        found["momentum_change"] = str(e)
    report(found)


def save(out_dir):
    """Three steps of a model with buffers; rank 0 saves it with
    ps.save_model and, for the test to compare, with torch.save."""
    torch.manual_seed(ps.rank())
    model = WithBuffers()
    ps.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = ps.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        named_parameters=model.named_parameters())
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(ps.rank()))
    for _ in range(3):
        opt.zero_grad()
        model(x).square().sum().backward()
        opt.step()
    if ps.rank() == 0:
        ps.save_model("%s/rank0.model" % out_dir, model)
        torch.save(model.state_dict(), "%s/trained.pt" % out_dir)


def converge(out_dir):
    """Least squares with server-side SGD; reports the loss before and
    after (ssp and async may apply stale gradients: it must still fall)."""
    torch.manual_seed(0)
    true_w = torch.tensor([[0.5], [-0.3], [0.2], [0.1]])
    model = nn.Linear(4, 1)
    opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(10 + ps.rank())
    test_x = torch.randn(256, 4, generator=torch.Generator().manual_seed(99))
    test_y = test_x @ true_w + 0.3

    def loss():
        with torch.no_grad():
            return F.mse_loss(model(test_x), test_y).item()

    before = loss()
    for _ in range(150):
        x = torch.randn(BATCH, 4, generator=g)
        opt.zero_grad()
        F.mse_loss(model(x), x @ true_w + 0.3).backward()
        opt.step()
    opt.pull_final()
    report({"before": before, "after": loss(), "mode": ps.mode()})


def replay(out_dir):
    """Two steps in epoch 1, then set_epoch(0) and num_examples = 0: each
    would make the servers skip every later push as a replay."""
    model = nn.Linear(2, 1)
    opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters())
    opt.set_epoch(1)
    x = torch.ones(4, 2)
    for _ in range(2):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    found = {}
    try:
        opt.set_epoch(0)
    except paramserver.Error as e:
        found["earlier_epoch"] = str(e)
    opt.num_examples = 0
    opt.zero_grad()
    model(x).sum().backward()
    try:
        opt.step()
    except paramserver.Error as e:
        found["no_examples"] = str(e)
    report(found)


def untrained(out_dir, placement):
    """Three steps at learning rate 0 (set after the declaration, which
    takes a positive one; each push carries it): the weights never
    change, and shutdown() warns."""
    model = nn.Linear(2, 1)
    opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1),
                                  named_parameters=model.named_parameters(),
                                  placement=placement)
    opt.param_groups[0]["lr"] = 0.0
    for _ in range(3):
        opt.zero_grad()
        model(torch.ones(4, 2)).sum().backward()
        opt.step()


def mismatch(out_dir):
    """Wraps Adam while the servers were started with --optimizer=sgd: the
    servers refuse the declaration."""
    model = nn.Linear(2, 1)
    ps.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                            named_parameters=model.named_parameters())


def auto_placement(out_dir):
    """RMSprop, which the servers lack, with placement='auto': it steps on
    the workers, which only sync mode allows."""
    model = nn.Linear(2, 1)
    ps.DistributedOptimizer(torch.optim.RMSprop(model.parameters(), lr=0.01),
                            named_parameters=model.named_parameters(),
                            placement="auto")


def main():
    scenario, out_dir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    ps.init()
    scenarios = {"equivalence": equivalence, "declaration": declaration,
                 "converge": converge, "mismatch": mismatch, "save": save,
                 "auto_placement": auto_placement, "edits": edits,
                 "replay": replay, "untrained": untrained}
    scenarios[scenario](out_dir, *sys.argv[3:])
    ps.shutdown()


if __name__ == "__main__":
    main()
