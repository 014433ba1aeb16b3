"""Where a model is cut into pipeline stages.

A model is an nn.Sequential (cut between its children, at given points or
balanced by parameter count) or a list of modules, one per stage. Either
way the whole model is an nn.Sequential whose parameter names
(``"<child>.<name>"``) are what every rank declares to the servers, so
the pipelined model saves and loads as the unsplit one does. Pure: no
servers.
"""

import collections

import torch


def as_sequential(model):
    """(nn.Sequential of the whole model, the split points a list of
    stages implies, or None)."""
    if isinstance(model, torch.nn.Sequential):
        return model, None
    if isinstance(model, (list, tuple)):
        if not all(isinstance(m, torch.nn.Module) for m in model):
            raise TypeError("paramserver.pipeline: a list of stages holds "
                            "nn.Modules, one per stage")
        return torch.nn.Sequential(*model), list(range(1, len(model)))
    raise TypeError("paramserver.pipeline: the model is an nn.Sequential "
                    "or a list of modules (one per stage), not %s" %
                    type(model).__name__)


def _parameter_count(module):
    return sum(p.numel() for p in module.parameters())


def balanced_points(sizes, stages):
    """The stages - 1 cut points (indices into `sizes`, strictly
    increasing) that make the largest stage's total size smallest; every
    stage gets at least one module. Ties: the earliest cut."""
    n = len(sizes)
    prefix = [0]
    for s in sizes:
        prefix.append(prefix[-1] + s)
    inf = float("inf")
    # best[k][i]: the smallest largest stage over the first i modules in
    # k stages; cut[k][i]: where the last of those k stages starts.
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0
    for k in range(1, stages + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                cost = max(best[k - 1][j], prefix[i] - prefix[j])
                if cost < best[k][i]:
                    best[k][i], cut[k][i] = cost, j
    points, i = [], n
    for k in range(stages, 1, -1):
        i = cut[k][i]
        points.append(i)
    return sorted(points)


def split_points(sequential, stages, points=None):
    """The checked cut points of `sequential` into `stages` stages: the
    given ones, or balanced_points by parameter count."""
    n = len(sequential)
    if stages < 1:
        raise ValueError("paramserver.pipeline: stages must be >= 1, got %r"
                         % (stages,))
    if n < stages:
        raise ValueError("paramserver.pipeline: cannot split %d modules "
                         "into %d stages: each stage needs at least one" %
                         (n, stages))
    if points is None:
        return balanced_points([_parameter_count(m) for m in sequential],
                               stages)
    points = [int(p) for p in points]
    if len(points) != stages - 1:
        raise ValueError("paramserver.pipeline: %d stages need %d split "
                         "points, got %s" % (stages, stages - 1, points))
    bounds = [0] + points + [n]
    if any(a >= b for a, b in zip(bounds, bounds[1:])):
        raise ValueError("paramserver.pipeline: split points %s of %d "
                         "modules must be strictly increasing within (0, %d)"
                         " (each stage needs at least one module)" %
                         (points, n, n))
    return points


def stage_modules(sequential, points, stage):
    """Stage `stage`'s nn.Sequential, its children keeping their names in
    the whole model."""
    bounds = [0] + list(points) + [len(sequential)]
    names = list(sequential._modules.items())
    return torch.nn.Sequential(collections.OrderedDict(
        names[bounds[stage]:bounds[stage + 1]]))


def stage_of_parameters(sequential, points):
    """{parameter name: its stage}, in the whole model's order."""
    bounds = [0] + list(points) + [len(sequential)]
    owner = {}
    for index, (child, module) in enumerate(sequential._modules.items()):
        stage = sum(1 for b in bounds[1:-1] if b <= index)
        for name, _ in module.named_parameters():
            owner["%s.%s" % (child, name)] = stage
    return owner
