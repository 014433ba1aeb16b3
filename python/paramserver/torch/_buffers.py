"""average_buffers: the ranks' mean of a module's buffers (BatchNorm's
running_mean, running_var and num_batches_tracked), through the servers'
collective service.

Each rank's BatchNorm normalises its own batch and updates its own running
statistics, so ranks drift apart. With placement='server' each step's
push and pull averages the declared buffers (_optimizer.py); what happens
between steps (evaluation passes) and with placement='worker' is averaged
only here: not behind the script's back, because a collective that some
rank does not reach (a script that evaluates or saves on rank 0 only)
would hang. The policy:
every rank calls average_buffers(model) before evaluating or saving, as
Horovod scripts allreduce their metrics; the model saved afterwards
(save_model) holds the averaged buffers.
"""

import numpy as np
import torch

from paramserver.torch import _runtime

_AVERAGE = 1  # The native op code of an average.


def _buffers(module_or_state):
    if isinstance(module_or_state, torch.nn.Module):
        return list(module_or_state.named_buffers())
    return [(str(n), t) for n, t in module_or_state.items()]


def average_buffers(module_or_state):
    """Replaces each buffer of `module_or_state` (a module, or a dict of
    name -> tensor) by the ranks' mean, in place; integer buffers
    (num_batches_tracked) get the mean rounded to the nearest integer.
    Collective: every rank calls it with the same buffer names and shapes
    (a difference is refused on every rank, naming it). Every rank gets the
    same bits."""
    service = _runtime.require_init().client.collectives()
    for name, tensor in _buffers(module_or_state):
        values = np.ascontiguousarray(
            tensor.detach().cpu().numpy(), dtype=np.float32)
        mean = service.allreduce("paramserver.buffer." + name, _AVERAGE,
                                 values)
        if not tensor.dtype.is_floating_point:
            mean = np.rint(mean)
        with torch.no_grad():
            tensor.copy_(torch.from_numpy(
                np.asarray(mean, dtype=np.float32)).reshape(tensor.shape))
