"""A PyTorch worker program for python_torch_state_test.py:
`python_torch_state_program.py SCENARIO OUT_DIR [ARGS]`: BatchNorm buffers
averaged across ranks, and the wrapped optimizer's state_dict.
"""

import sys

import torch
import torch.nn as nn

import paramserver
import paramserver.torch as ps
from python_launch import report


class WithNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.norm = nn.BatchNorm1d(3)

    def forward(self, x):
        return self.norm(self.fc(x))


def buffers(out_dir):
    """Each rank trains on its own data for 3 steps (saving its buffers,
    which the steps gave the ranks' mean), then a rank-dependent number of
    forward passes, saves its buffers, averages them, and saves again;
    rank 0 then saves the model."""
    model = WithNorm()
    ps.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = ps.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(ps.rank())
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4, generator=g) * (1 + ps.rank())).sum() \
            .backward()
        opt.step()
    # Each step's pull brought the servers' buffers: the ranks' mean.
    torch.save(dict(model.named_buffers()),
               "%s/stepped%d.pt" % (out_dir, ps.rank()))
    with torch.no_grad():  # Counted by num_batches_tracked, not trained.
        for _ in range(ps.rank()):
            model(torch.randn(8, 4, generator=g))
    torch.save(dict(model.named_buffers()),
               "%s/before%d.pt" % (out_dir, ps.rank()))
    ps.average_buffers(model)
    torch.save(dict(model.named_buffers()),
               "%s/after%d.pt" % (out_dir, ps.rank()))
    if ps.rank() == 0:
        ps.save_model("%s/model" % out_dir, model)


def optimizer_state(out_dir, placement):
    """state_dict() after two Adam steps, a third step, load_state_dict
    of the first; reports what held and what was refused."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = ps.DistributedOptimizer(
        torch.optim.Adam(model.parameters(), lr=0.01),
        named_parameters=model.named_parameters(), placement=placement)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(ps.rank()))

    def step():
        opt.zero_grad()
        model(x).square().sum().backward()
        opt.step()

    step()
    step()
    saved = opt.state_dict()
    torch.save(saved, "%s/opt%d.pt" % (out_dir, ps.rank()))
    step()
    found = {"tensors_with_state": len(saved["state"]),
             "note": saved.get("paramserver")}
    # state_dict() shares the live tensors, which step() changed: compare
    # with the copy on disk.
    saved = torch.load("%s/opt%d.pt" % (out_dir, ps.rank()))
    opt.load_state_dict(saved)
    ps.barrier()  # Placement 'server': rank 0 has written it.
    again = opt.state_dict()
    found["round_trip"] = all(
        torch.equal(saved["state"][k][s], again["state"][k][s])
        for k in saved["state"] for s in saved["state"][k])
    # Placement 'server': every rank has read it back before rank 0
    # overwrites it below.
    ps.barrier()
    # A plain torch Adam's state, with moments, as a checkpoint holds it.
    plain = torch.optim.Adam(nn.Linear(4, 2).parameters())
    plain.zero_grad()
    plain.param_groups[0]["params"][0].grad = torch.ones(2, 4)
    plain.param_groups[0]["params"][1].grad = torch.ones(2)
    plain.step()
    try:
        opt.load_state_dict(plain.state_dict())
        found["plain_refused"] = None
    except paramserver.Error as e:
        found["plain_refused"] = str(e)
    ps.barrier()
    loaded = opt.state_dict()["state"]
    found["plain_loaded"] = all(
        torch.equal(loaded[k][s], plain.state_dict()["state"][k][s])
        for k in loaded for s in loaded[k])
    report(found)


def main():
    scenario, out_dir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    ps.init()
    {"buffers": buffers, "optimizer_state": optimizer_state}[scenario](
        out_dir, *sys.argv[3:])
    ps.shutdown()


if __name__ == "__main__":
    main()
