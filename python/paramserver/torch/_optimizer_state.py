"""The servers' optimizer state in PyTorch's layout, and back.

With placement='server' the optimizer's state lives on the servers, each
shard holding that of its slices (ParameterClient::ReadOptimizerState).
These functions map it to what torch.optim.Adam and torch.optim.SGD keep
per parameter, so that a state_dict() of the wrapped optimizer looks like
theirs (saved with torch.save, loaded into either):

- Adam: {"step": tensor(t), "exp_avg": m, "exp_avg_sq": v}; the servers'
  Adam is torch's (amsgrad off, L2 weight decay added to the gradient).
- SGD with momentum: {"momentum_buffer": v}, the velocity of
  v <- momentum * v + g, as torch's (dampening 0, no nesterov); torch
  starts with v = g where the servers start with v = 0: the same.
- SGD without momentum: {"momentum_buffer": None}, as torch 1.13 keeps.

A parameter that has not been updated (count 0, state all zeros) has no
entry, as in torch before its first step; loading a state without an
entry for a parameter gives it zeros and count 0.
"""

import numpy as np
import torch

# PyTorch's names of the servers' state vectors, by optimizer kind.
_TORCH_NAMES = {"adam": {"m": "exp_avg", "v": "exp_avg_sq"},
                "sgd": {"momentum": "momentum_buffer"}}


def param_indices(param_groups, trainable):
    """The index torch's state_dict() gives each of `trainable`'s
    parameters ([(name, param)]): their position among every group's
    params, counted as torch.optim.Optimizer.state_dict counts them."""
    index, next_index = {}, 0
    for group in param_groups:
        for p in group["params"]:
            if id(p) not in index:
                index[id(p)] = next_index
            next_index += 1
    return [index[id(p)] for _, p in trainable]


def to_torch(server_state, trainable, indices):
    """The "state" of a torch state_dict for `server_state` (from
    read_optimizer_state), whose first len(trainable) tensors are the
    trainable parameters'."""
    kind = server_state["kind"]
    names = _TORCH_NAMES[kind]
    state = {}
    for i, ((_, p), index) in enumerate(zip(trainable, indices)):
        tensor = server_state["tensors"][i]
        count = int(tensor["update_count"])
        vectors = tensor["vectors"]
        if count == 0 and all(not np.any(v) for v in vectors.values()):
            continue  # Never updated: torch keeps no entry yet.
        entry = {}
        if kind == "adam":
            entry["step"] = torch.tensor(float(count))
        for name, values in vectors.items():
            entry[names[name]] = torch.from_numpy(
                np.array(values, dtype=np.float32)).reshape(p.shape)
        if kind == "sgd" and not vectors:
            entry["momentum_buffer"] = None
        state[index] = entry
    return state


def _as_array(value, name, what, shape):
    array = (value.detach().cpu().numpy() if torch.is_tensor(value)
             else np.asarray(value))
    if array.size != int(np.prod(shape, dtype=np.int64)):
        raise ValueError("paramserver: load_state_dict: %s of %s has %d "
                         "values, the parameter %s" %
                         (what, name, array.size, tuple(shape)))
    return np.ascontiguousarray(array, dtype=np.float32).reshape(shape)


def from_torch(torch_state, server_state, trainable, indices):
    """`server_state` (as read, giving the structure: kind, each tensor's
    vectors) with the trainable parameters' state replaced by
    `torch_state`'s (a torch state_dict's "state"); ValueError naming the
    parameter for an entry that does not map."""
    kind = server_state["kind"]
    names = _TORCH_NAMES[kind]
    for i, ((name, p), index) in enumerate(zip(trainable, indices)):
        tensor = server_state["tensors"][i]
        entry = torch_state.get(index, {})
        wanted = {names[v] for v in tensor["vectors"]}
        if kind == "adam" and entry:
            wanted.add("step")
        # SGD without momentum: torch keeps momentum_buffer None.
        extra = set(entry) - wanted - (
            {"momentum_buffer"} if kind == "sgd" else set())
        if (entry and not wanted <= set(entry)) or extra:
            raise ValueError(
                "paramserver: load_state_dict: the state of %s (index %d) "
                "holds %s; the servers' %s keeps %s%s" %
                (name, index, sorted(entry), kind, sorted(wanted),
                 " (amsgrad is not supported)" if "max_exp_avg_sq" in entry
                 else ""))
        for vector in list(tensor["vectors"]):
            value = entry.get(names[vector])
            tensor["vectors"][vector] = (
                np.zeros(p.shape, np.float32) if value is None else
                _as_array(value, name, names[vector], tuple(p.shape)))
        step = entry.get("step", 0)
        tensor["update_count"] = int(step.item() if torch.is_tensor(step)
                                     else step)
    return server_state
