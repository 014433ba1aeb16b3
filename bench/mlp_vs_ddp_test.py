"""bench/mlp_vs_ddp.py without test hosts: its flags, the order --alternate
runs the configurations in, each run's command line, and reading
bench/multi_host.sh's output. Run by //bench:mlp_vs_ddp_test."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlp_vs_ddp as bench  # pylint: disable=wrong-import-position

OUTPUT = """own hosts=4 rate=1000Mbit wall=23.7s exit=0 load=15.8 \
outcome="completed: final test accuracy 0.8743"
  host 0: sent 885 MB, received 886 MB
  host 1: sent 886 MB, received 885 MB
"""


def test_alternate_interleaves_runs_and_the_default_does_not():
    args = bench.parse_args(["--layouts=own", "--wires=float32",
                             "--transports=grpc,frames", "--repeats=2",
                             "--alternate"])
    configs = bench.configurations(args)
    assert configs == [("own", "float32", "grpc"),
                       ("own", "float32", "frames"), ("ddp", None, None)]
    assert [(r, c[0], c[2]) for r, c in bench.schedule(args, configs)] == [
        (0, "own", "grpc"), (0, "own", "frames"), (0, "ddp", None),
        (1, "own", "grpc"), (1, "own", "frames"), (1, "ddp", None)]
    args.alternate = False
    assert [r for r, _ in bench.schedule(args, configs)] == [0, 1] * 3


def test_commands_set_the_transport_and_wire_per_configuration():
    args = bench.parse_args(["--", "--epochs=2"])
    assert bench.command(args, 1000, ("own", "bf16", "frames"))[2:] == [
        "1000", "own", "--server_flags=--tcp_data_port=0",
        "--worker_flags=--compression=bf16", "--epochs=2"]
    assert bench.command(args, 10000, ("colocated", "float32", "grpc"))[2:] == [
        "10000", "colocated", "--server_flags=--tcp_data_port=-1",
        "--epochs=2"]
    assert bench.command(args, 0, ("ddp", None, None))[2:] == [
        "0", "ddp", "--epochs=2"]


@pytest.mark.parametrize("argv, message", [
    (["--transports=grpc,tcp"], "'tcp' is not one of grpc, frames"),
    (["--wires=fp8"], "'fp8' is not one of float32, bf16"),
    (["--layouts=own,own"], "--layouts lists an entry twice"),
    (["--rates_mbit=1G"], "'1G' is not a whole number"),
    (["--repeats=0"], "--repeats must be >= 1, got 0"),
    (["--", "--worker_flags=--x"], "--worker_flags is set per configuration"),
    (["--", "epochs=2"], "job flags must be --NAME=VALUE"),
])
def test_bad_flags_are_refused_by_name(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_reads_a_run_and_tables_it_against_ddp():
    run = bench.parse_run(OUTPUT)
    assert run == {"wall": 23.7, "load": "15.8", "accuracy": "0.8743",
                   "sent": [885, 886], "received": [886, 885]}
    assert bench.parse_run(OUTPUT.replace("exit=0", "exit=1")) is None
    assert bench.parse_run(OUTPUT.replace("final test accuracy 0.8743",
                                          "failed")) is None
    ddp = dict(run, wall=47.4)
    text = bench.table(1000, [("own", "float32", "grpc"), ("ddp", None, None),
                              ("own", "bf16", "grpc")],
                       {("own", "float32", "grpc"): [run],
                        ("ddp", None, None): [ddp]})
    rows = text.splitlines()
    assert rows[1] == "1 Gbit/s:"
    assert "| 23.7; 23.7 | 2.00x | 0.8743 | 885-886 / 885-886 | 15.8 |" in (
        rows[5])
    assert "| 47.4; 47.4 | 1.00x |" in rows[6]
    assert rows[7].endswith("| failed | | | | |")
