"""A worker program on the paramserver module alone, for
python_client_test.py: `python_client_program.py SCENARIO`.

Each scenario reports what it saw with RESULT lines (python_launch.report)
and exits 0, so that the test, not the job's exit code, judges it.
"""

import os
import sys

import numpy as np

import paramserver
from python_launch import report

# Every value below is a multiple of a power of two small enough that
# float32 holds each sum, mean and update exactly: the test can then
# compare the servers' arithmetic bit for bit.
LEARNING_RATE = 0.5


def gradients(rank, step):
    """Rank `rank`'s gradients of step `step` (w: [2, 3], b: [3])."""
    w = np.arange(6, dtype=np.float32).reshape(2, 3) / 8 * (rank + 1)
    b = np.array([1, -1, 2], np.float32) / 4 * (step + 1) * (1 - 2 * rank)
    return [w + step, b]


def declaration():
    return [("w", (2, 3), "from_rank0"),
            paramserver.tensor_spec("b", [3], ("constant", 0.25),
                                    weight_decay=False)]


def sync_arithmetic(client):
    """Three steps through the three ways to push; reports the weights
    after each, and whether the arrays stayed views of the same memory."""
    client.declare(declaration(), planned_steps=3)
    views = client.weights
    address = [v.__array_interface__["data"][0] for v in views]
    if client.rank == 0:
        views[0][...] = np.arange(6, dtype=np.float32).reshape(2, 3) / 16
    weights = client.broadcast()
    seen = [[w.tolist() for w in weights]]

    # Step 0: streamed, tensor by tensor, by name and out of order.
    g = gradients(client.rank, 0)
    step = client.start_step(0)
    step.send("b", g[1])
    step.send(0, g[0])
    step.finish_with_pull()
    seen.append([w.tolist() for w in client.weights])
    # Step 1: push and pull in one call.
    client.push_pull(1, gradients(client.rank, 1))
    seen.append([w.tolist() for w in client.weights])
    # Step 2: a push, then a pull of step 3's weights; gradients by name.
    g = gradients(client.rank, 2)
    client.push(2, {"w": g[0], "b": g[1]})
    client.pull(3)
    seen.append([w.tolist() for w in client.weights])

    same = (client.weights is views and
            [v.__array_interface__["data"][0] for v in client.weights] ==
            address)
    report({"weights": seen, "same_buffers": same,
            "version": client.version, "mode": client.mode,
            "model": [repr(t) for t in client.model]})
    client.finish()


def compressed_gradients(rank):
    """Step 0's gradients for `compressed`: w's not exact in bfloat16, b's
    with one largest element per rank."""
    w, b = gradients(rank, 0)
    return [w / 3, b * (rank + 1)]


def compressed(client):
    """One sync step with w in bfloat16 both ways and b top-k (1 of 3
    elements sent); reports the weights pulled after it."""
    client.declare(declaration(), planned_steps=1)
    if client.rank == 0:
        client.weights[0][...] = np.arange(6, dtype=np.float32).reshape(
            2, 3) / 16
    client.broadcast()
    client.set_compression("w", "bf16")
    client.set_compression(1, "topk", 0.3)
    bad = [error(lambda: client.set_compression("w", "zip")),
           error(lambda: client.set_compression("b", "topk", 0.0))]
    client.push_pull(0, compressed_gradients(client.rank))
    report({"weights": [w.tolist() for w in client.weights], "bad": bad})
    client.finish()


def error(fn):
    """[exception class, code, message] of what fn() raises, or None."""
    try:
        fn()
    except paramserver.Error as e:
        return [type(e).__name__, e.code, str(e),
                isinstance(e, ValueError), isinstance(e, LookupError)]
    return None


def errors(client):
    """Rank 0 makes every mistake once; rank 1 first declares a different
    model, then trains along so that the sync steps complete."""
    found = {}
    if client.rank == 1:
        found["mismatch"] = error(lambda: client.declare(
            [("w", (3, 2), "from_rank0"), ("b", (3,), ("constant", 0.25),
                                           False)], planned_steps=2))
        found["optimizer_mismatch"] = error(lambda: client.declare(
            declaration(), planned_steps=2,
            optimizer=paramserver.OptimizerSpec.sgd(LEARNING_RATE)))
        client.declare(declaration(), planned_steps=2)
        client.broadcast()
        for step in range(2):
            client.push_pull(step, gradients(1, step))
        report(found)
        client.finish()
        return

    found["pull_before_declare"] = error(lambda: client.pull(0))
    found["bad_declaration"] = error(lambda: client.declare(
        [("w", (2, 0))], planned_steps=2))
    found["bad_initializer"] = error(
        lambda: paramserver.tensor_spec("w", (2,), "xavier"))
    found["bad_optimizer"] = error(lambda: client.declare(
        declaration(), planned_steps=2,
        optimizer=paramserver.OptimizerSpec.sgd(LEARNING_RATE, 1.5)))
    # The servers run --optimizer=sgd, given explicitly.
    found["optimizer_against_flags"] = error(lambda: client.declare(
        declaration(), planned_steps=2,
        optimizer=paramserver.OptimizerSpec.adam(LEARNING_RATE)))
    client.declare(declaration(), planned_steps=2)
    found["unknown_name"] = error(lambda: client.tensor_id("nope"))
    found["pull_before_broadcast"] = error(lambda: client.pull(0))
    client.broadcast()

    g = gradients(0, 0)
    found["wrong_size"] = error(
        lambda: client.push_pull(0, [g[0][:1], g[1]]))
    incomplete = client.start_step(0)
    incomplete.send("w", g[0])
    found["missing_tensor"] = error(incomplete.finish_with_pull)
    found["send_after_finish"] = error(lambda: incomplete.send("b", g[1]))
    found["bad_learning_rate"] = error(
        lambda: client.start_step(0, learning_rate=float("nan")))
    nan = g[0].copy()
    nan[1, 2] = np.nan
    found["nan_gradient"] = error(lambda: client.push_pull(0, [nan, g[1]]))
    # The refused step goes through once pushed right.
    client.push_pull(0, g)
    client.push_pull(1, gradients(0, 1))
    found["weights_after"] = [w.tolist() for w in client.weights]
    report(found)
    client.finish()


def explicit_servers():
    """Names the servers and rank itself, as a program run without the
    launcher does; the launcher's TLS settings (PS_TLS_*) still apply
    unless overridden."""
    named = {"servers": os.environ["PS_SERVERS"],
             "rank": int(os.environ["PS_RANK"]),
             "job_id": os.environ["PS_JOB_ID"]}
    rank = named["rank"]
    found = {"plaintext": error(lambda: paramserver.Client(
        connect_timeout=2, tls_ca_file="", token_file="", **named))}
    with paramserver.Client(**named) as client:
        client.declare(declaration(), planned_steps=1)
        client.broadcast()
        client.push_pull(0, gradients(rank, 0))
        found["trained"] = client.version
        client.finish()
    report(found)


def stuck_cursor(client):
    """Four steps whose data cursor stays at (epoch 0, 32 examples): the
    servers apply the first and skip the others as replays; reports the
    weights before and after each step."""
    client.declare(declaration(), planned_steps=4)
    seen = [[w.tolist() for w in client.broadcast()]]
    for step in range(4):
        client.push_pull(step, gradients(client.rank, step), num_examples=32,
                         epoch=0, examples_done=32)
        seen.append([w.tolist() for w in client.weights])
    client.finish()
    report({"weights": seen, "replays": client.replays.replays})


def main():
    scenario = sys.argv[1]
    if scenario == "explicit_servers":
        explicit_servers()
        return
    client = paramserver.Client()
    {"sync_arithmetic": sync_arithmetic, "errors": errors,
     "stuck_cursor": stuck_cursor, "compressed": compressed}[scenario](client)
    client.close()


if __name__ == "__main__":
    main()
