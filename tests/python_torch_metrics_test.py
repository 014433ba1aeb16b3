"""A paramserver.torch worker's Prometheus metrics: unit tests of the
numbers (paramserver.torch._metrics) with a fake clock, and a job through
the launcher with --metrics_port_base whose workers serve them on the C++
worker's ports.

Run by //tests:python_torch_metrics_test on Debian's /usr/bin/python3.
"""

import random
import re
import socket

import pytest

import python_launch
from paramserver.torch._metrics import WorkerMetrics

PROGRAM = "tests/python_torch_metrics_program.py"


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def value(text, series):
    m = re.search(r"^%s (\S+)$" % re.escape(series), text, re.M)
    assert m, "no %s in:\n%s" % (series, text)
    return float(m.group(1))


def phase(text, rank, name):
    return value(text, 'ps_worker_step_phase_seconds_total{rank="%d",'
                 'phase="%s"}' % (rank, name))


def test_a_step_is_split_into_compute_communication_and_waiting():
    clock = FakeClock()
    metrics = WorkerMetrics(3, clock)
    clock.now += 2.0  # Forward and backward.
    with metrics.phase("communication"):
        clock.now += 0.5
    clock.now += 1.0  # More backward.
    with metrics.phase("waiting"):
        clock.now += 0.25
    metrics.step_done(examples=32, epoch=0, replayed=2)
    text = metrics.text()
    assert value(text, 'ps_worker_replayed_pushes_total{rank="3"}') == 2
    assert phase(text, 3, "compute") == 3.0
    assert phase(text, 3, "communication") == 0.5
    assert phase(text, 3, "waiting") == 0.25
    assert value(text, 'ps_worker_steps_total{rank="3"}') == 1
    assert value(text, 'ps_worker_examples_total{rank="3"}') == 32
    assert value(text, 'ps_worker_examples_per_second{rank="3"}') == \
        pytest.approx(32 / 3.75)
    assert value(text, 'ps_worker_epoch{rank="3"}') == 1
    assert "ps_worker_loss" not in text  # Not reported yet.
    metrics.report_loss(0.125)
    assert value(metrics.text(), 'ps_worker_loss{rank="3"}') == 0.125


def _consecutive_free_ports(count):
    """A base port whose `count` ports are free now on 127.0.0.1."""
    for _ in range(200):
        base = random.randint(20000, 60000 - count)
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no %d consecutive free ports" % count)


@pytest.mark.parametrize("placement", ["server", "worker"])
def test_a_jobs_workers_serve_their_metrics_on_the_launchers_ports(
        placement):
    base = _consecutive_free_ports(4)
    job = python_launch.run(
        PROGRAM, [placement],
        ["--num_servers=2", "--num_workers=2", "--mode=sync",
         "--optimizer=sgd", "--metrics_port_base=%d" % base])
    for rank in (0, 1):
        found = job.result(rank)
        # The C++ worker's port: after the servers'.
        assert found["port"] == base + 2 + rank
        text = found["metrics"]
        label = 'rank="%d"' % rank
        assert value(text, "ps_worker_steps_total{%s}" % label) == 5
        assert value(text, "ps_worker_examples_total{%s}" % label) == 40
        assert value(text, "ps_worker_loss{%s}" % label) == \
            pytest.approx(found["loss"], rel=1e-6)
        for name in ("compute", "communication", "waiting"):
            assert phase(text, rank, name) > 0, name
