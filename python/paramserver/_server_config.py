"""Which optimizer the servers run, as far as a worker process can tell.

The declaration does not carry the optimizer (that needs the wire contract
and the servers to change), so a worker cannot tell the servers what to
run; it can only check that what they run is what its script wraps. The
servers take their optimizer from flags, which reach a worker in one of two
ways, tried in this order:

1. The environment: PS_OPTIMIZER (adam|sgd), PS_LEARNING_RATE, PS_MOMENTUM,
   PS_WEIGHT_DECAY, PS_BETA1, PS_BETA2, PS_EPSILON, PS_LR_SCHEDULE
   (constant|cosine), PS_MIN_LEARNING_RATE. A deployment that starts the
   servers with flags (Kubernetes manifests, a script) sets these in the
   workers' environment too; unset ones mean the servers' defaults.
2. The command line of the local launcher (deploy/local/launch) that
   started this process, read from /proc: its --optimizer,
   --learning_rate, --lr_schedule and what --server_flags adds, which is
   exactly what it passes to every server.

With neither, the check cannot be made and ``current()`` returns None.
"""

import os
import shlex

import numpy as np

# server/server_main.cc's flag defaults.
SERVER_DEFAULTS = {
    "optimizer": "adam",
    "learning_rate": 0.001,
    "momentum": 0.9,
    "weight_decay": 0.0,
    "beta1": 0.9,
    "beta2": 0.999,
    "epsilon": 1e-8,
    "lr_schedule": "constant",
    "min_learning_rate": 0.0,
}

# deploy/local/launch_main.cc's, where they differ from the servers'; its
# --learning_rate=0 means "the servers' default" and is not passed on.
LAUNCHER_DEFAULTS = {}

_STRING_FLAGS = ("optimizer", "lr_schedule")
_ENVIRONMENT = {"PS_" + name.upper(): name for name in SERVER_DEFAULTS}


def _typed(name, text):
    """The flag's value as the servers would parse it."""
    if name in _STRING_FLAGS:
        return text
    try:
        return float(text)
    except ValueError:
        raise ValueError("cannot read --%s=%r" % (name, text)) from None


def from_environment(environ=None):
    """The config the PS_* variables describe, or None if PS_OPTIMIZER is
    unset."""
    environ = os.environ if environ is None else environ
    if not environ.get("PS_OPTIMIZER"):
        return None
    config = dict(SERVER_DEFAULTS)
    for variable, name in _ENVIRONMENT.items():
        if environ.get(variable):
            config[name] = _typed(name, environ[variable])
    return config


def _flags(args, wanted):
    """{name: text} for the flags in `wanted`, the last occurrence winning,
    as Abseil parses them (--name=value, --name value, one or two dashes),
    up to a bare "--"."""
    found = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            break
        if not arg.startswith("-"):
            continue
        name, equals, value = arg.lstrip("-").partition("=")
        if name == "flagfile":
            raise ValueError("the launcher was given --flagfile")
        if name not in wanted:
            continue
        if not equals:
            if i >= len(args):
                break
            value = args[i]
            i += 1
        found[name] = value
    return found


def from_launcher_command(argv):
    """The config the launcher with this argv passes to its servers."""
    config = dict(SERVER_DEFAULTS)
    config.update(LAUNCHER_DEFAULTS)
    launcher = _flags(argv[1:], {"optimizer", "learning_rate", "lr_schedule",
                                 "server_flags"})
    for name in ("optimizer", "lr_schedule"):
        if name in launcher:
            config[name] = launcher[name]
    if "learning_rate" in launcher and float(launcher["learning_rate"]) > 0:
        config["learning_rate"] = float(launcher["learning_rate"])
    # The launcher splits --server_flags at whitespace and appends them
    # after its own, so they win.
    extra = _flags(shlex.split(launcher.get("server_flags", "")),
                   set(SERVER_DEFAULTS))
    for name, text in extra.items():
        config[name] = _typed(name, text)
    return config


def _parent(pid):
    with open("/proc/%d/stat" % pid) as f:
        stat = f.read()
    # The command name (field 2) may hold spaces; fields after it are plain.
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _argv(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]


def _is_launcher(pid):
    try:
        exe = os.path.realpath("/proc/%d/exe" % pid)
    except OSError:
        exe = ""
    return exe.endswith("/deploy/local/launch")


def find_launcher_argv(pid=None):
    """The argv of the deploy/local launcher among this process's
    ancestors, or None."""
    pid = os.getpid() if pid is None else pid
    try:
        while pid > 1:
            pid = _parent(pid)
            if _is_launcher(pid):
                return _argv(pid)
    except (OSError, ValueError, IndexError):
        pass
    return None


def current():
    """(config, where it came from), or (None, why not)."""
    config = from_environment()
    if config is not None:
        return config, "the PS_OPTIMIZER... environment variables"
    argv = find_launcher_argv()
    if argv is None:
        return None, ("neither PS_OPTIMIZER is set nor was this process "
                      "started by deploy/local/launch")
    try:
        return from_launcher_command(argv), "the launcher's flags"
    except ValueError as e:
        return None, "the launcher's flags cannot be read: %s" % e


def same32(a, b):
    """Equal as the servers' float32 flags hold them."""
    return np.float32(a) == np.float32(b)


def check_group(group, config, kind):
    """Differences between a torch optimizer's param_group of `kind`
    ("sgd" or "adam") and the servers' config, in words."""
    problems = []

    def differ(what, ours, theirs, flag):
        if not same32(ours, theirs):
            problems.append("%s %s, servers --%s=%s" % (what, ours, flag,
                                                        theirs))

    if config["optimizer"] != kind:
        problems.append("the servers run --optimizer=%s" % config["optimizer"])
        return problems
    differ("lr", group["lr"], config["learning_rate"], "learning_rate")
    if kind == "sgd":
        differ("momentum", group.get("momentum", 0), config["momentum"],
               "momentum")
        if group.get("dampening", 0) != 0 or group.get("nesterov", False):
            problems.append("dampening/nesterov, which the servers lack")
    else:
        beta1, beta2 = group["betas"]
        differ("betas[0]", beta1, config["beta1"], "beta1")
        differ("betas[1]", beta2, config["beta2"], "beta2")
        differ("eps", group["eps"], config["epsilon"], "epsilon")
        if group.get("amsgrad", False):
            problems.append("amsgrad, which the servers lack")
    if group.get("maximize", False):
        problems.append("maximize, which the servers lack")
    wd = group.get("weight_decay", 0)
    if wd != 0:
        differ("weight_decay", wd, config["weight_decay"], "weight_decay")
    return problems


# Servers that average gradients: SGD at learning rate 1 applies
# w - mean(pushes), which paramserver.torch's worker placement relies on.
SUMMATION_FLAGS = ("--optimizer=sgd --learning_rate=1 "
                   "--lr_schedule=constant --server_flags=--momentum=0")


def is_summation_service(config):
    """Whether servers so configured just average gradients."""
    return (config is not None and config["optimizer"] == "sgd" and
            same32(config["learning_rate"], 1) and
            same32(config["momentum"], 0) and
            config["lr_schedule"] == "constant")


def describe(config):
    """The flags that matter, for messages."""
    return ", ".join("--%s=%s" % (k, config[k]) for k in (
        "optimizer", "learning_rate", "momentum", "lr_schedule"))
