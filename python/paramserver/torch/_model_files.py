"""save_model and load_model: state_dicts in the servers' model format."""

import os

import torch

import paramserver


def save_model(path, state):
    """Saves a module's state_dict (or `state`, a state_dict) as a model
    file: every tensor as float32 (integer buffers such as BatchNorm's
    counter included, if float32 holds them exactly), the format the
    servers' and the C++ worker's models use. Call it on one rank."""
    if isinstance(state, torch.nn.Module):
        state = state.state_dict()
    paramserver.save_model(path, [(name, t.detach().cpu().numpy())
                                  for name, t in state.items()])


def load_model(path):
    """A state_dict of float32 tensors from a model file (save_model's, the
    C++ worker's --save_model) or, for a directory, from the servers'
    checkpoints in it (their --checkpoint_dir; the newest version every
    shard wrote). ``module.load_state_dict(ps.load_model(p))`` converts to
    the module's dtypes; names are those declared (DistributedOptimizer
    declares named_parameters' names)."""
    if os.path.isdir(path):
        tensors, _ = paramserver.load_checkpoint(path)
    else:
        tensors = paramserver.load_model(path)
    return {name: torch.from_numpy(array) for name, array in tensors.items()}
