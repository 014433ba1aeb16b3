"""A PyTorch worker program for python_torch_optimizer_state_test.py:
`python_torch_optimizer_state_program.py SCENARIO OUT_DIR [ARGS]`.

- ``resume OUT_DIR full KIND``: trains N steps, rank 0 saves model and
  optimizer with torch.save, trains M more and saves the weights.
- ``resume OUT_DIR resumed KIND``: a fresh job loads that checkpoint
  (every rank, as a script would) and trains the same M steps;
  ``no_state`` loads only the model.
- ``against_torch OUT_DIR``: one rank steps the servers' Adam and a plain
  torch.optim.Adam on the same gradients, and saves both state_dicts.
"""

import copy
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import paramserver.torch as ps

N, M = 3, 3
K = 5  # Steps of against_torch.


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def make_optimizer(model, kind):
    if kind == "adam":
        base = torch.optim.Adam(model.parameters(), lr=0.01)
    else:
        base = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return ps.DistributedOptimizer(base,
                                   named_parameters=model.named_parameters())


def batch(rank, step):
    """The same data for a (rank, step) in every run."""
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)


def gradients(model, step):
    x, y = batch(ps.rank(), step)
    F.mse_loss(model(x), y).backward()


def train(model, opt, steps):
    for step in steps:
        opt.zero_grad()
        gradients(model, step)
        opt.step()


def resume(out_dir, phase, kind):
    checkpoint = "%s/checkpoint.pt" % out_dir
    model = make_model()
    if phase == "full":
        opt = make_optimizer(model, kind)
        train(model, opt, range(N))
        if ps.rank() == 0:
            torch.save({"model": model.state_dict(),
                        "optimizer": opt.state_dict()}, checkpoint)
    else:
        saved = torch.load(checkpoint)
        model.load_state_dict(saved["model"])
        opt = make_optimizer(model, kind)
        if phase == "resumed":
            opt.load_state_dict(saved["optimizer"])
    train(model, opt, range(N, N + M))
    if ps.rank() == 0:
        torch.save(model.state_dict(), "%s/%s.pt" % (out_dir, phase))


def against_torch(out_dir):
    model = make_model()
    plain_model = copy.deepcopy(model)
    opt = make_optimizer(model, "adam")
    plain = torch.optim.Adam(plain_model.parameters(), lr=0.01)
    grads = []
    for step in range(K):
        opt.zero_grad()
        gradients(model, step)
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
        for p, g in zip(plain_model.parameters(), grads[-1]):
            p.grad = g.clone()
        plain.step()
    torch.save({"ours": opt.state_dict(), "plain": plain.state_dict(),
                "grads": grads}, "%s/states.pt" % out_dir)


def main():
    scenario, out_dir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    ps.init()
    {"resume": resume, "against_torch": against_torch}[scenario](
        out_dir, *sys.argv[3:])
    ps.shutdown()


if __name__ == "__main__":
    main()
