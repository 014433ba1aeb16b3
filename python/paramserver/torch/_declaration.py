"""The tensors a DistributedOptimizer declares to the servers.

The optimizer's trainable parameters first (named by named_parameters, in
the optimizer's order), then the tensors broadcast_parameters was given
before (buffers, frozen parameters), which are broadcast once and then
pushed as zeros.
"""

import warnings

import torch

import paramserver


def check_tensor(name, p):
    """Raises TypeError unless `p` is a dense float32 CPU tensor."""
    if p.dtype != torch.float32 or p.device.type != "cpu" or p.is_sparse:
        raise TypeError("paramserver: %s is %s on %s; only dense float32 CPU "
                        "parameters are supported" % (name, p.dtype,
                                                      p.device))


def trainable_parameters(param_groups, named_parameters):
    """[(name, param)] of the optimizer's trainable parameters, in the
    optimizer's order, named as named_parameters says (a list, or None
    for param.<group>.<index>)."""
    names = {}
    if named_parameters is not None:
        for name, p in named_parameters:
            names.setdefault(id(p), name)
    else:
        warnings.warn("paramserver: no named_parameters; parameters are "
                      "declared as param.<group>.<index>")
    result, seen = [], set()
    for gi, group in enumerate(param_groups):
        for pi, p in enumerate(group["params"]):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            name = names.get(id(p))
            if name is None:
                if named_parameters is not None:
                    raise ValueError(
                        "paramserver: a parameter of the optimizer "
                        "(group %d, index %d, shape %s) is not in "
                        "named_parameters" % (gi, pi, tuple(p.shape)))
                name = "param.%d.%d" % (gi, pi)
            check_tensor(name, p)
            result.append((name, p))
    if not result:
        raise ValueError("paramserver: the optimizer has no trainable "
                         "parameters")
    return result


def group_of(param_groups, param):
    """The param group holding `param`."""
    for group in param_groups:
        if any(p is param for p in group["params"]):
            return group
    raise AssertionError("not in the optimizer")


def hyperparameters(param_groups):
    """What the declaration fixes: all but the learning rate, which every
    push carries."""
    keys = ("momentum", "betas", "eps", "weight_decay", "dampening",
            "nesterov", "amsgrad", "maximize")
    return [{k: g[k] for k in keys if k in g} for g in param_groups]


def tensor_specs(trainable, pending, wd_flags):
    """The TensorSpecs to declare and [(index, tensor)] of the extra ones:
    `trainable` ([(name, param)], with `wd_flags`), then the tensors of
    `pending` ({name: tensor}) that are not trainable parameters."""
    specs = []
    trainable_ptrs = set()
    for (name, p), wd in zip(trainable, wd_flags):
        # Worker placement: the tensor holds the summation state, which
        # brings rank 0's values first, then is zeroed (see the
        # optimizer's _send).
        specs.append(paramserver.tensor_spec(name, p.shape, "from_rank0",
                                             wd))
        trainable_ptrs.add((p.data_ptr(), tuple(p.shape)))
    extra = []
    for name, tensor in pending.items():
        if (tensor.data_ptr(), tuple(tensor.shape)) in trainable_ptrs:
            continue  # A state_dict entry of a trainable parameter.
        if tensor.is_floating_point() or tensor.dtype in (
                torch.int64, torch.int32, torch.int16, torch.int8,
                torch.uint8, torch.bool):
            # Assigned: each step pushes the tensor's value, and the
            # servers keep the ranks' mean (BatchNorm's statistics).
            specs.append(paramserver.tensor_spec(
                name, tensor.shape, "from_rank0", False, assigned=True))
            extra.append((len(specs) - 1, tensor))
        else:
            raise TypeError("paramserver: cannot broadcast %s of dtype "
                            "%s" % (name, tensor.dtype))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError("paramserver: two tensors named alike in %s" %
                         names)
    return specs, extra
