"""Checkpoints of the all-reduce mode's PyTorch workers.

Rank 0 writes one every `every` steps into the launcher's --checkpoint_dir
(PS_CHECKPOINT_DIR): the trainable parameters by name, the wrapped
optimizer's state_dict (momentum, Adam moments) and the step and epoch,
as one torch.save file, "ring-<step>.pt" (the step zero-padded, so names
sort by step), written to a temporary name and renamed, so a kill mid-write
leaves the previous one. The newest two are kept. At start every rank gets
rank 0's newest through the ring (ring_blob), so hosts need not share the
directory.
"""

import io
import os
import re

import numpy as np
import torch

_NAME = re.compile(r"^ring-(\d{12})\.pt$")
_KEEP = 2


def path_for(directory, step):
    return os.path.join(directory, "ring-%012d.pt" % step)


def newest(directory):
    """The newest checkpoint's path in `directory`, or None."""
    if not directory or not os.path.isdir(directory):
        return None
    names = sorted(n for n in os.listdir(directory) if _NAME.match(n))
    return os.path.join(directory, names[-1]) if names else None


def encode(step, epoch, params, optimizer_state):
    """The checkpoint's bytes: `params` {name: tensor}."""
    buffer = io.BytesIO()
    torch.save({"step": int(step), "epoch": int(epoch),
                "params": {n: p.detach().clone() for n, p in params.items()},
                "optimizer": optimizer_state}, buffer)
    return buffer.getvalue()


def decode(data):
    """encode()'s dict from its bytes."""
    return torch.load(io.BytesIO(bytes(data)))


def write(directory, step, data):
    """`data` (encode()'s) as the checkpoint of `step`, atomically; drops
    all but the newest _KEEP."""
    os.makedirs(directory, exist_ok=True)
    final = path_for(directory, step)
    temporary = final + ".tmp"
    with open(temporary, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, final)
    names = sorted(n for n in os.listdir(directory) if _NAME.match(n))
    for name in names[:-_KEEP]:
        os.remove(os.path.join(directory, name))


def ring_blob(ring, data, tag):
    """Rank 0's `data` (bytes, or None for none) on every rank of `ring`:
    its length first, then its bytes. None where rank 0 had none."""
    length = np.zeros(8, dtype=np.uint8)
    if ring.rank == 0 and data is not None:
        length[:] = np.frombuffer(np.uint64(len(data) + 1).tobytes(),
                                  dtype=np.uint8)
    ring.broadcast_(length, 0, tag)
    size = int(np.frombuffer(length.tobytes(), dtype=np.uint64)[0])
    if size == 0:
        return None
    payload = np.zeros(size - 1, dtype=np.uint8)
    if ring.rank == 0:
        payload[:] = np.frombuffer(data, dtype=np.uint8)
    ring.broadcast_(payload, 0, tag + 1)
    return payload.tobytes()
