"""The binding of the all-reduce ring (paramserver._native.join_ring,
NativeRing, NativeBuckets: python/native_ring.cc) and the ring's
checkpoint files (paramserver.torch._allreduce_checkpoint), without the
launcher: the real coordinator binary, and the ranks of one ring as
threads of this process (join_ring and wait release the GIL).
"""

import os
import subprocess
import threading

import numpy as np
import pytest
import torch

import paramserver
from paramserver import _native
from paramserver.torch import _allreduce_checkpoint as checkpoints

import python_launch


@pytest.fixture
def coordinator(tmp_path):
    """Starts the coordinator for 2 workers of job "j"; its address."""
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [python_launch.runfile("allreduce/coordinator"), "--num_workers=2",
         "--host=127.0.0.1", "--port=0", "--job_id=j",
         "--port_file=%s" % port_file])
    try:
        python_launch.wait_for(port_file, [proc])
        yield "127.0.0.1:%s" % port_file.read_text().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=python_launch.TIMEOUT_S)


def on_ring(address, work, size=2):
    """Runs work(ring) as each rank of one ring, in threads; their
    results by rank (an exception raised in a rank is raised here)."""
    results, errors = [None] * size, []

    def rank_main(rank):
        try:
            ring = _native.join_ring(
                coordinator=address, rank=rank, num_workers=size, job_id="j",
                hostname="127.0.0.1", join_timeout_s=60, timeout_s=60)
            results[rank] = work(ring)
        except Exception as e:  # pylint: disable=broad-except
            errors.append(e)

    threads = [threading.Thread(target=rank_main, args=(r,))
               for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(python_launch.TIMEOUT_S)
    if errors:
        raise errors[0]
    return results


def test_sums_and_broadcasts_in_place(coordinator):
    def work(ring):
        values = np.arange(5, dtype=np.float32) * (ring.rank + 1)
        ring.allreduce_sum_(values, 7)
        data = np.full(3, ring.rank + 10, dtype=np.uint8)
        ring.broadcast_(data, 1, 8)
        return ring.rank, ring.size, values, data

    for rank, (got_rank, size, values, data) in enumerate(
            on_ring(coordinator, work)):
        assert (got_rank, size) == (rank, 2)
        np.testing.assert_array_equal(values, np.arange(5) * 3)
        np.testing.assert_array_equal(data, [11, 11, 11])


def test_buckets_sum_each_tensor_scaled(coordinator):
    sizes = [3, 2, 4]

    def work(ring):
        buckets = ring.buckets(sizes, 16)  # 4 floats: tensors don't share.
        assert buckets.num_buckets == 3
        # Packed from the last tensor: backward's order.
        assert [buckets.bucket_of(t) for t in range(3)] == [2, 1, 0]
        out = []
        for step in range(2):
            buckets.begin()
            for t in reversed(range(3)):
                buckets.add(t, np.full(sizes[t], t + step, np.float32),
                            float(ring.rank + 1))
            buckets.wait()
            reduced = [np.zeros(n, np.float32) for n in sizes]
            for t in range(3):
                buckets.reduced_into(t, reduced[t])
            out.append(reduced)
        return out

    for result in on_ring(coordinator, work):
        for step, reduced in enumerate(result):
            for t, values in enumerate(reduced):
                # (t + step) * 1 + (t + step) * 2.
                np.testing.assert_array_equal(values, 3.0 * (t + step))


def test_buckets_refuse_wrong_tensors(coordinator):
    def work(ring):
        buckets = ring.buckets([3], 1024)
        with pytest.raises(paramserver.FailedPreconditionError):
            buckets.add(0, np.zeros(3, np.float32), 1.0)  # No step open.
        buckets.begin()
        with pytest.raises(paramserver.InvalidArgumentError):
            buckets.add(1, np.zeros(3, np.float32), 1.0)
        with pytest.raises(paramserver.InvalidArgumentError):
            buckets.add(0, np.zeros(2, np.float32), 1.0)
        buckets.add(0, np.ones(3, np.float32), 1.0)
        buckets.wait()
        with pytest.raises(paramserver.InvalidArgumentError):
            buckets.reduced_into(0, np.zeros(4, np.float32))
        with pytest.raises(paramserver.InvalidArgumentError):
            buckets.bucket_of(5)
        return True

    assert on_ring(coordinator, work) == [True, True]


def test_a_coordinator_of_another_job_is_refused(coordinator):
    with pytest.raises(paramserver.FailedPreconditionError):
        _native.join_ring(coordinator=coordinator, rank=0, num_workers=2,
                          job_id="other", hostname="127.0.0.1",
                          join_timeout_s=30, timeout_s=30)


def test_checkpoints_keep_the_newest_two_and_round_trip(tmp_path):
    directory = str(tmp_path / "ckpt")
    assert checkpoints.newest(directory) is None
    params = {"w": torch.arange(4, dtype=torch.float32)}
    for step in (5, 10, 15):
        checkpoints.write(directory, step, checkpoints.encode(
            step, 1, params, {"state": {}, "param_groups": []}))
    assert sorted(os.listdir(directory)) == [
        "ring-000000000010.pt", "ring-000000000015.pt"]
    newest = checkpoints.newest(directory)
    assert newest.endswith("ring-000000000015.pt")
    with open(newest, "rb") as f:
        saved = checkpoints.decode(f.read())
    assert saved["step"] == 15 and saved["epoch"] == 1
    assert torch.equal(saved["params"]["w"], params["w"])
    # A write killed before its rename leaves only a temporary file, which
    # is not a checkpoint.
    open(os.path.join(directory, "ring-000000000020.pt.tmp"), "wb").close()
    assert checkpoints.newest(directory) == newest


def test_a_checkpoint_reaches_every_rank_over_the_ring(coordinator):
    blob = b"\x00\x01checkpoint" * 1000

    def work(ring):
        return [checkpoints.ring_blob(ring, blob if ring.rank == 0 else None,
                                      100),
                checkpoints.ring_blob(ring, None, 102)]

    for with_blob, without in on_ring(coordinator, work):
        assert with_blob == blob
        assert without is None
