"""The main job (C++ workers, sync) against PyTorch DDP across test hosts.

Runs bench/multi_host.sh once per configuration and run: ours in each
--layouts (own: shards on 2 hosts of their own; colocated: a shard on each
worker's host), --wires (float32, or bf16 both ways: the workers'
--compression) and --transports (grpc: the servers' --tcp_data_port=-1;
frames: --tcp_data_port=0, the same-host transport's frames over TCP), and
the same MLP under DDP (bench/ddp_mlp_job.py, gloo, one process per host),
at each of --rates_mbit. With --alternate, run r of every configuration
comes before run r + 1 of any, so load drift on a shared machine hits all
alike; without, each configuration's runs are back to back. Prints every
run's line, then one Markdown table per rate: wall time (median; runs), the
speed against DDP (DDP's median wall time over ours), final test accuracy,
what each host sent and received, and the 1-minute load as each run began.
Needs root and the binaries:

  bazel build -c opt //deploy/local:launch //server //worker //tests/hosts:hosts
  /usr/bin/python3 bench/mlp_vs_ddp.py --rates_mbit=1000,10000 --repeats=3 \\
      --alternate -- --epochs=2

Flags after `--` go to every run (launch's names, which the DDP job shares:
--epochs, --batch_size, --learning_rate, --seed, --model).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYOUTS = ("own", "colocated")
WIRES = ("float32", "bf16")
TRANSPORTS = {"grpc": -1, "frames": 0}
LAYOUT_NAMES = {"own": "ours, shards on 2 hosts of their own",
                "colocated": "ours, a shard on each worker's host",
                "ddp": "PyTorch DDP (gloo)"}
RUN_LINE = re.compile(r"^(\S+) hosts=(\d+) rate=(\d+)Mbit wall=([\d.]+)s "
                      r"exit=(-?\d+) load=(\S+) outcome=\"(.*)\"$")
HOST_LINE = re.compile(r"^\s+host (\d+): sent (\d+) MB, received (\d+) MB$")
ACCURACY = re.compile(r"final test accuracy ([\d.]+)")


def choices(text, allowed, flag):
    """A comma-separated list of entries of `allowed`, each once."""
    values = [v.strip() for v in text.split(",")]
    for v in values:
        if v not in allowed:
            raise argparse.ArgumentTypeError(
                "--%s: %r is not one of %s" % (flag, v, ", ".join(allowed)))
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError("--%s lists an entry twice: %s"
                                         % (flag, text))
    return values


def rates(text):
    values = []
    for v in text.split(","):
        if not v.strip().isdigit():
            raise argparse.ArgumentTypeError(
                "--rates_mbit: %r is not a whole number of Mbit/s" % v)
        values.append(int(v))
    return values


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rates_mbit", type=rates, default=[1000, 10000],
                   help="link rates, comma-separated (0: unshaped)")
    p.add_argument("--layouts", default=list(LAYOUTS),
                   type=lambda t: choices(t, LAYOUTS, "layouts"))
    p.add_argument("--wires", default=list(WIRES),
                   type=lambda t: choices(t, WIRES, "wires"))
    p.add_argument("--transports", default=list(TRANSPORTS),
                   type=lambda t: choices(t, list(TRANSPORTS), "transports"))
    p.add_argument("--ddp", type=int, choices=[0, 1], default=1,
                   help="1: run the DDP job too (the tables' reference)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--alternate", action="store_true",
                   help="interleave the configurations run by run")
    p.add_argument("--script", default=os.path.join(ROOT, "bench",
                                                    "multi_host.sh"))
    p.add_argument("job_flags", nargs="*",
                   help="after --: flags for every run")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be >= 1, got %d" % args.repeats)
    for flag in args.job_flags:
        if not flag.startswith("--"):
            p.error("job flags must be --NAME=VALUE, got %r" % flag)
        if flag.split("=")[0] in ("--server_flags", "--worker_flags"):
            p.error("%s is set per configuration (--transports, --wires)"
                    % flag.split("=")[0])
    return args


def configurations(args):
    """(layout, wire, transport) of each configuration; DDP's last, with
    neither wire nor transport."""
    configs = [(layout, wire, transport) for layout in args.layouts
               for wire in args.wires for transport in args.transports]
    if args.ddp:
        configs.append(("ddp", None, None))
    return configs


def schedule(args, configs):
    """(run index, configuration) in the order they run."""
    if args.alternate:
        return [(r, c) for r in range(args.repeats) for c in configs]
    return [(r, c) for c in configs for r in range(args.repeats)]


def command(args, rate, config):
    layout, wire, transport = config
    argv = ["bash", args.script, str(rate), layout]
    if layout != "ddp":
        argv.append("--server_flags=--tcp_data_port=%d" % TRANSPORTS[transport])
        if wire != "float32":
            argv.append("--worker_flags=--compression=%s" % wire)
    return argv + args.job_flags


def parse_run(output):
    """{wall, load, accuracy, sent, received} from multi_host.sh's lines
    (sent and received: the range over hosts, MB), or None if it failed."""
    run = None
    sent, received = [], []
    for line in output.splitlines():
        m = RUN_LINE.match(line)
        if m:
            accuracy = ACCURACY.search(m.group(7))
            if m.group(5) != "0" or accuracy is None:
                return None
            run = {"wall": float(m.group(4)), "load": m.group(6),
                   "accuracy": accuracy.group(1)}
        m = HOST_LINE.match(line)
        if m:
            sent.append(int(m.group(2)))
            received.append(int(m.group(3)))
    if run is None or not sent:
        return None
    run["sent"], run["received"] = sent, received
    return run


def span(values):
    low, high = min(values), max(values)
    return "%d" % low if low == high else "%d-%d" % (low, high)


def table(rate, configs, runs):
    """The Markdown table of one rate; runs: config -> list of runs."""
    lines = ["", "%s:" % ("unshaped" if rate == 0 else
                          "%g Gbit/s" % (rate / 1000)), "",
             "| layout | wire | transport | wall time, s (median; runs) | "
             "vs DDP | final test accuracy | each host sent / received, MB "
             "| load average |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    ddp = runs.get(("ddp", None, None))
    ddp_median = statistics.median(r["wall"] for r in ddp) if ddp else None
    for config in configs:
        layout, wire, transport = config
        done = runs.get(config, [])
        if not done:
            lines.append("| %s | %s | %s | failed | | | | |" % (
                LAYOUT_NAMES[layout], wire or "float32", transport or "gloo"))
            continue
        walls = [r["wall"] for r in done]
        median = statistics.median(walls)
        lines.append("| %s | %s | %s | %.1f; %s | %s | %s | %s / %s | %s |" % (
            LAYOUT_NAMES[layout], wire or "float32", transport or "gloo",
            median, ", ".join("%.1f" % w for w in walls),
            "%.2fx" % (ddp_median / median) if ddp_median else "",
            ", ".join(sorted(set(r["accuracy"] for r in done))),
            span([s for r in done for s in r["sent"]]),
            span([s for r in done for s in r["received"]]),
            ", ".join(r["load"] for r in done)))
    return "\n".join(lines)


def main(argv):
    args = parse_args(argv)
    if not os.path.exists(args.script):
        sys.exit("mlp_vs_ddp: no %s" % args.script)
    configs = configurations(args)
    tables = []
    for rate in args.rates_mbit:
        runs = {}
        for index, config in schedule(args, configs):
            argv = command(args, rate, config)
            proc = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, check=False)
            output = proc.stdout.decode(errors="replace")
            print("run %d: %s\n%s" % (index + 1, " ".join(argv[1:]),
                                      output.rstrip()), flush=True)
            run = parse_run(output)
            if run is not None:
                runs.setdefault(config, []).append(run)
        tables.append(table(rate, configs, runs))
        print(tables[-1], flush=True)
    print("\n".join(tables))


if __name__ == "__main__":
    main(sys.argv[1:])
