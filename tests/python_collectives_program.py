"""A Horovod-style program of collectives on paramserver.torch, for
python_collectives_test.py: `python_collectives_program.py SCENARIO [ARGS]`.

Every rank's tensors are functions of (rank, size), so each rank can compute
the numpy reference of every collective itself (in rank order, float32, as
the servers combine); the program reports, per case, whether the result is
that reference bit for bit, and a digest of the result bytes, which the test
compares across ranks.
"""

import hashlib
import os
import sys

import numpy as np
import torch

import paramserver
import paramserver.torch as hvd
from python_launch import report

# (), a small matrix, and one large enough to be spread over the servers
# (more than client/collectives.h kSplitElements).
SHAPES = [(), (3, 4), (300, 401)]
OPS = [("sum", hvd.Sum), ("average", hvd.Average), ("min", hvd.Min),
       ("max", hvd.Max)]


def values(rank, shape, salt=0):
    """Rank `rank`'s float32 tensor of `shape`: distinct per rank, with sums
    that round, so that the order of summing shows."""
    n = int(np.prod(shape, dtype=np.int64))
    i = np.arange(n, dtype=np.float64)
    v = (rank + 1) * 0.1 + (i % 97) * (-1.3 if rank % 2 else 0.7) + salt
    return v.astype(np.float32).reshape(shape)


def reference(op, size, shape, salt=0):
    acc = values(0, shape, salt).copy()
    for r in range(1, size):
        v = values(r, shape, salt)
        if op in ("sum", "average"):
            acc = acc + v
        elif op == "min":
            acc = np.minimum(acc, v)
        else:
            acc = np.maximum(acc, v)
    if op == "average":
        acc = acc / np.float32(size)
    return acc.astype(np.float32)


def digest(array):
    return hashlib.sha1(np.ascontiguousarray(array).tobytes()).hexdigest()


def same(got, want):
    """Bit-identical float32 arrays of one shape."""
    got = np.asarray(got, dtype=np.float32)
    return got.shape == want.shape and got.tobytes() == want.tobytes()


def collectives():
    rank, size = hvd.rank(), hvd.size()
    out = {}
    for op_name, op in OPS:
        for shape in SHAPES:
            key = "allreduce %s %s" % (op_name, shape)
            t = torch.from_numpy(values(rank, shape))
            got = hvd.allreduce(t, op=op, name=key).numpy()
            out[key] = [same(got, reference(op_name, size, shape)),
                        digest(got)]
    # In place, unnamed, with scaling: (2 * sum) / 4.
    t = torch.from_numpy(values(rank, (5,)).copy())
    hvd.allreduce_(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25)
    want = sum_scaled(size, (5,), 2.0) * np.float32(0.25)
    out["allreduce_ scaled"] = [same(t.numpy(), want), digest(t.numpy())]
    # fp16 compression: rounded before and after, as Horovod's.
    t = torch.from_numpy(values(rank, (7,), 0.3))
    got = hvd.allreduce(t, op=hvd.Sum, compression=hvd.Compression.fp16,
                        name="fp16")
    acc = values(0, (7,), 0.3).astype(np.float16).astype(np.float32)
    for r in range(1, size):
        acc = acc + values(r, (7,), 0.3).astype(np.float16).astype(np.float32)
    want = acc.astype(np.float16).astype(np.float32)
    out["allreduce fp16"] = [got.dtype == torch.float32 and
                             same(got.numpy(), want), digest(got.numpy())]
    # Allgather: rank r sends r + 1 rows.
    rows = torch.from_numpy(values(rank, (rank + 1, 3)))
    got = hvd.allgather(rows, name="rows").numpy()
    want = np.concatenate([values(r, (r + 1, 3)) for r in range(size)])
    out["allgather"] = [same(got, want), digest(got)]
    # Broadcast from the last rank; in place from rank 0.
    root = size - 1
    got = hvd.broadcast(torch.from_numpy(values(rank, (300, 401))), root,
                        name="big").numpy()
    out["broadcast"] = [same(got, values(root, (300, 401))), digest(got)]
    t = torch.from_numpy(values(rank, (2, 2)).copy())
    hvd.broadcast_(t, 0, name="small")
    out["broadcast_"] = [same(t.numpy(), values(0, (2, 2))),
                         digest(t.numpy())]
    # Objects.
    obj = hvd.broadcast_object({"epoch": 7, "rank": rank,
                                "w": torch.ones(2) * rank}, root_rank=root)
    out["broadcast_object"] = [
        obj["rank"] == root and obj["epoch"] == 7 and
        obj["w"].tolist() == [float(root)] * 2, repr(sorted(obj))]
    gathered = hvd.allgather_object({"rank": rank, "pad": "x" * rank})
    out["allgather_object"] = [
        [g["rank"] for g in gathered] == list(range(size)) and
        [len(g["pad"]) for g in gathered] == list(range(size)),
        repr(gathered)]
    # Parameters and optimizer state from the last rank.
    torch.manual_seed(rank)
    net = torch.nn.Linear(3, 2)
    hvd.broadcast_parameters(net.state_dict(), root_rank=root)
    torch.manual_seed(root)
    want_net = torch.nn.Linear(3, 2)
    out["broadcast_parameters"] = [
        all(torch.equal(a, b) for a, b in zip(net.state_dict().values(),
                                              want_net.state_dict().values())),
        digest(net.weight.detach().numpy())]
    opt = torch.optim.Adam(net.parameters(), lr=0.1 * (rank + 1))
    for p in net.parameters():
        p.grad = torch.full_like(p, float(rank + 1))
    opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=root)
    moments = opt.state[net.weight]["exp_avg"]
    out["broadcast_optimizer_state"] = [
        opt.param_groups[0]["lr"] == 0.1 * (root + 1) and
        torch.allclose(moments, torch.full_like(moments, 0.1 * (root + 1))),
        opt.param_groups[0]["lr"]]
    # Async: unnamed calls of different shapes in flight together.
    handles = [hvd.allreduce_async(torch.from_numpy(values(rank, s)),
                                   op=hvd.Sum) for s in [(4,), (70000,), ()]]
    results = [hvd.synchronize(h).numpy() for h in handles]
    out["async"] = [all(same(r, reference("sum", size, s))
                        for r, s in zip(results, [(4,), (70000,), ()])),
                    digest(np.concatenate([r.ravel() for r in results]))]
    h = hvd.allgather_async(torch.tensor([float(rank)]))
    while not hvd.poll(h):
        pass
    got = hvd.synchronize(h).numpy()
    out["poll"] = [got.tolist() == [float(r) for r in range(size)],
                   digest(got)]
    grouped = hvd.grouped_allreduce(
        [torch.from_numpy(values(rank, (3,))),
         torch.from_numpy(values(rank, (2, 5)))], op=hvd.Max, name="group")
    out["grouped_allreduce"] = [
        same(grouped[0].numpy(), reference("max", size, (3,))) and
        same(grouped[1].numpy(), reference("max", size, (2, 5))),
        digest(grouped[1].numpy())]
    hvd.barrier()
    # Uneven data: rank r has r + 1 batches, then joins.
    sums = []
    for step in range(rank + 1):
        sums.append(float(hvd.allreduce(torch.tensor(1.0), op=hvd.Sum,
                                        name="batch")))
    last = hvd.join()
    out["join"] = [sums == [float(size - s) for s in range(rank + 1)] and
                   last in range(size), last if hvd.size() == 1 else "any"]
    report(out)


def sum_scaled(size, shape, prescale):
    acc = values(0, shape) * np.float32(prescale)
    for r in range(1, size):
        acc = acc + values(r, shape) * np.float32(prescale)
    return acc


def mismatch():
    """Rank 1's tensor has another shape; rank 2 (if any) names an unknown
    root. Every rank reports the error it got."""
    rank, size = hvd.rank(), hvd.size()
    out = {}
    shape = (4,) if rank == 1 else (3,)
    try:
        hvd.allreduce(torch.zeros(shape), name="m")
        out["shape"] = None
    except paramserver.Error as e:
        out["shape"] = [type(e).__name__, str(e)]
    try:
        hvd.broadcast(torch.zeros(2), root_rank=size + 3, name="root")
        out["root"] = None
    except paramserver.Error as e:
        out["root"] = [type(e).__name__, str(e)]
    try:
        hvd.allreduce(torch.zeros(2), op=hvd.Adasum)
        out["adasum"] = None
    except NotImplementedError as e:
        out["adasum"] = ["NotImplementedError", str(e)]
    # Still usable.
    out["after"] = float(hvd.allreduce(torch.tensor(1.0), op=hvd.Sum,
                                       name="after"))
    report(out)


def restart(out_dir):
    """Rank 1 dies after its first allreduce the first time (its result in
    OUT_DIR/first.npy); started again, it repeats the call with other
    values, alone: it must get the same result. Rank 0 waits at a barrier
    meanwhile."""
    rank = hvd.rank()
    first = os.path.join(out_dir, "first.npy")
    again = os.path.exists(first)
    salt = 100.0 if again else 0.0
    got = hvd.allreduce(torch.from_numpy(values(rank, (70000,), salt)),
                        op=hvd.Sum, name="grad").numpy()
    if rank == 1 and not again:
        np.save(first, got)
        sys.stdout.flush()
        os._exit(3)
    hvd.barrier()
    result = {"digest": digest(got)}
    if again:
        result["same_as_first"] = got.tobytes() == np.load(first).tobytes()
    report(result)


def main():
    hvd.init()
    scenario = sys.argv[1]
    if scenario == "collectives":
        collectives()
    elif scenario == "mismatch":
        mismatch()
    elif scenario == "restart":
        restart(sys.argv[2])
    else:
        raise SystemExit("unknown scenario %r" % scenario)
    hvd.shutdown()


if __name__ == "__main__":
    main()
