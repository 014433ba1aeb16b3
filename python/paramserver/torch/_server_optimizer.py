"""The servers' optimizer for a torch one, and where the optimizer runs.

The servers implement SGD (momentum, weight decay) and Adam; server_spec
maps a torch optimizer's class and param_groups to the equal
paramserver.OptimizerSpec, or says why there is none. Worker placement
declares summation_spec() instead, and averages through the servers'
collectives.
"""

import torch

import paramserver

# The optimizer worker placement declares. It gets no pushes (the gradients
# are averaged by the servers' collectives): any declared optimizer would
# do, and plain SGD keeps the servers' state smallest.
SUMMATION_LR = 1.0


def summation_spec():
    return paramserver.OptimizerSpec.sgd(SUMMATION_LR, 0.0, 0.0)


def _server_kind(cls, param_groups):
    """"sgd" or "adam" for what the servers implement, else None."""
    if cls is torch.optim.SGD:
        return "sgd"
    if cls is torch.optim.Adam:
        return "adam"
    if cls is torch.optim.AdamW and all(
            g["weight_decay"] == 0 for g in param_groups):
        return "adam"  # AdamW without decay is Adam.
    return None


def server_spec(cls, groups):
    """The servers' OptimizerSpec equal to an optimizer of class `cls` with
    `groups`, or (None, why not)."""
    kind = _server_kind(cls, groups)
    if kind is None:
        return None, ("the servers implement SGD (momentum, weight decay) "
                      "and Adam, not %s" % cls.__name__)
    lacks = {"sgd": ("dampening", "nesterov"), "adam": ("amsgrad",)}[kind]
    problems = []
    for i, g in enumerate(groups):
        for key in lacks + ("maximize",):
            if g.get(key):
                problems.append("param_groups[%d] sets %s=%r, which the "
                                "servers lack" % (i, key, g[key]))
    keys = ("lr", "momentum") if kind == "sgd" else ("lr", "betas", "eps")
    for key in keys:
        values = sorted({repr(g.get(key, 0)) for g in groups})
        if len(values) > 1:
            problems.append("the param_groups' %s differ (%s); the servers "
                            "hold one optimizer" % (key, ", ".join(values)))
    decays = sorted({float(g.get("weight_decay", 0)) for g in groups} - {0})
    if len(decays) > 1:
        problems.append("the param_groups' weight_decay differ (%s); the "
                        "servers apply one, or none to a tensor" %
                        ", ".join(map(repr, decays)))
    if problems:
        return None, "; ".join(problems)
    g = groups[0]
    wd = decays[0] if decays else 0.0
    if kind == "sgd":
        spec = paramserver.OptimizerSpec.sgd(
            float(g["lr"]), float(g.get("momentum", 0)), wd)
    else:
        beta1, beta2 = g["betas"]
        spec = paramserver.OptimizerSpec.adam(
            float(g["lr"]), float(beta1), float(beta2), float(g["eps"]), wd)
    return spec, None


def resolve_placement(placement, optimizer):
    """"server" or "worker" for `placement`; see the package's docstring."""
    if placement not in ("auto", "server", "worker"):
        raise ValueError("placement is 'auto', 'server' or 'worker', got %r"
                         % (placement,))
    if placement != "auto":
        return placement
    spec, _ = server_spec(type(optimizer), optimizer.param_groups)
    return "server" if spec is not None else "worker"


def declared_spec(placement, wrapped, param_groups, trainable_groups):
    """The OptimizerSpec to declare and each trainable parameter's weight
    decay flag (`trainable_groups`: each one's param group); raises
    ValueError if the servers cannot run `wrapped` (a class) here."""
    if placement == "worker":
        return summation_spec(), [False] * len(trainable_groups)
    spec, why = server_spec(wrapped, param_groups)
    if spec is None:
        raise ValueError(
            "paramserver: %s, so placement='server' cannot run this %s; "
            "use placement='worker' (sync mode: the servers average "
            "gradients and %s steps on every worker)" %
            (why, wrapped.__name__, wrapped.__name__))
    return spec, [g.get("weight_decay", 0) != 0 for g in trainable_groups]
