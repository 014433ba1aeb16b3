"""paramserver.torch's modules that need no servers: which torch optimizers
the servers run (_server_optimizer), what a DistributedOptimizer declares
(_declaration), and the process state before init() (_runtime).

Run by //tests:python_torch_units_test on Debian's /usr/bin/python3; the
layer as a whole, against real servers, is python_torch_test.py's.
"""

import os
import types
import warnings

import pytest
import torch

import paramserver
import paramserver.torch as ps
from paramserver.torch import (_declaration, _gradients, _runtime,
                                _server_optimizer)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.norm = torch.nn.BatchNorm1d(2)
        self.frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)


def groups(opt):
    return opt.param_groups


# -- _server_optimizer ------------------------------------------------------


def test_sgd_maps_to_the_servers_sgd_with_its_settings():
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.25, momentum=0.5,
                          weight_decay=0.125)
    spec, why = _server_optimizer.server_spec(torch.optim.SGD, groups(opt))
    assert why is None
    assert (spec.kind, spec.learning_rate, spec.momentum,
            spec.weight_decay) == ("sgd", 0.25, 0.5, 0.125)


def test_adam_maps_to_the_servers_adam_with_its_settings():
    opt = torch.optim.Adam(Net().parameters(), lr=0.5, betas=(0.75, 0.875),
                           eps=0.25)
    spec, why = _server_optimizer.server_spec(torch.optim.Adam, groups(opt))
    assert why is None
    assert (spec.kind, spec.learning_rate, spec.beta1, spec.beta2,
            spec.epsilon) == ("adam", 0.5, 0.75, 0.875, 0.25)


def test_adamw_is_adam_only_without_decay():
    net = Net()
    plain = torch.optim.AdamW(net.parameters(), weight_decay=0)
    spec, _ = _server_optimizer.server_spec(torch.optim.AdamW, groups(plain))
    assert spec.kind == "adam"
    decayed = torch.optim.AdamW(net.parameters(), weight_decay=0.01)
    spec, why = _server_optimizer.server_spec(torch.optim.AdamW,
                                              groups(decayed))
    assert spec is None
    assert "not AdamW" in why


def test_what_the_servers_lack_is_named():
    opt = torch.optim.SGD(Net().parameters(), lr=0.1, momentum=0.9,
                          nesterov=True)
    spec, why = _server_optimizer.server_spec(torch.optim.SGD, groups(opt))
    assert spec is None
    assert "param_groups[0] sets nesterov=True" in why


def test_groups_that_differ_but_in_learning_rate_or_zero_decay_are_refused():
    net = Net()
    same = torch.optim.SGD([
        {"params": [net.fc.weight], "weight_decay": 0.5},
        {"params": [net.fc.bias], "weight_decay": 0},
    ], lr=0.1)
    spec, why = _server_optimizer.server_spec(torch.optim.SGD, groups(same))
    assert why is None and spec.weight_decay == 0.5
    differ = torch.optim.SGD([
        {"params": [net.fc.weight], "momentum": 0.5},
        {"params": [net.fc.bias], "momentum": 0.25},
    ], lr=0.1)
    spec, why = _server_optimizer.server_spec(torch.optim.SGD, groups(differ))
    assert spec is None
    assert "momentum differ" in why


def test_auto_placement_is_the_server_where_it_can_run_the_optimizer():
    net = Net()
    resolve = _server_optimizer.resolve_placement
    assert resolve("auto", torch.optim.SGD(net.parameters(), lr=1)) == "server"
    assert resolve("auto", torch.optim.RMSprop(net.parameters())) == "worker"
    assert resolve("worker", torch.optim.SGD(net.parameters(), lr=1)) == \
        "worker"
    with pytest.raises(ValueError, match="placement is 'auto'"):
        resolve("gpu", torch.optim.SGD(net.parameters(), lr=1))


def test_worker_placement_declares_plain_summation_without_decay():
    net = Net()
    opt = torch.optim.RMSprop(net.parameters(), weight_decay=0.5)
    spec, flags = _server_optimizer.declared_spec(
        "worker", torch.optim.RMSprop, groups(opt), [groups(opt)[0]] * 3)
    assert (spec.kind, spec.learning_rate, spec.momentum) == ("sgd", 1.0, 0.0)
    assert flags == [False] * 3


def test_server_placement_refuses_what_the_servers_cannot_run():
    opt = torch.optim.RMSprop(Net().parameters())
    with pytest.raises(ValueError, match="use placement='worker'"):
        _server_optimizer.declared_spec("server", torch.optim.RMSprop,
                                        groups(opt), [])


def test_server_placement_flags_the_tensors_of_decayed_groups():
    net = Net()
    opt = torch.optim.SGD([
        {"params": [net.fc.weight], "weight_decay": 0.5},
        {"params": [net.fc.bias], "weight_decay": 0},
    ], lr=0.1)
    _, flags = _server_optimizer.declared_spec(
        "server", torch.optim.SGD, groups(opt), groups(opt))
    assert flags == [True, False]


# -- _declaration -----------------------------------------------------------


# The optimizer lists fc.bias twice on purpose (declared once).
@pytest.mark.filterwarnings("ignore:optimizer contains a parameter group")
def test_trainable_parameters_are_named_in_the_optimizers_order():
    net = Net()
    opt = torch.optim.SGD([net.fc.bias, net.fc.weight, net.fc.bias,
                           net.frozen], lr=0.1)
    got = _declaration.trainable_parameters(groups(opt),
                                            list(net.named_parameters()))
    assert [name for name, _ in got] == ["fc.bias", "fc.weight"]
    assert got[0][1] is net.fc.bias


def test_unnamed_parameters_are_numbered_with_a_warning():
    net = Net()
    opt = torch.optim.SGD(net.fc.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _declaration.trainable_parameters(groups(opt), None)
    assert [name for name, _ in got] == ["param.0.0", "param.0.1"]
    assert any("no named_parameters" in str(w.message) for w in caught)


def test_a_parameter_missing_from_named_parameters_is_an_error():
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="not in named_parameters"):
        _declaration.trainable_parameters(
            groups(opt), list(net.fc.named_parameters()))


def test_only_dense_float32_cpu_parameters_are_taken():
    p = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    opt = torch.optim.SGD([p], lr=0.1)
    with pytest.raises(TypeError, match="only dense float32 CPU"):
        _declaration.trainable_parameters(groups(opt), [("p", p)])


def test_an_optimizer_without_trainable_parameters_is_an_error():
    net = Net()
    opt = torch.optim.SGD([net.frozen], lr=0.1)
    with pytest.raises(ValueError, match="no trainable parameters"):
        _declaration.trainable_parameters(groups(opt),
                                          list(net.named_parameters()))


def test_hyperparameters_leave_out_the_learning_rate():
    opt = torch.optim.SGD(Net().parameters(), lr=0.1, momentum=0.5)
    (got,) = _declaration.hyperparameters(groups(opt))
    assert "lr" not in got and got["momentum"] == 0.5


def test_the_declaration_is_the_trainables_then_the_other_pending_tensors():
    net = Net()
    opt = torch.optim.SGD(net.fc.parameters(), lr=0.1)
    trainable = _declaration.trainable_parameters(
        groups(opt), list(net.named_parameters()))
    specs, extra = _declaration.tensor_specs(
        trainable, dict(net.state_dict()), [True, False])
    names = [s.name for s in specs]
    assert names[:2] == ["fc.weight", "fc.bias"]
    # The state_dict's entries of trainable parameters are not declared
    # twice; buffers and frozen parameters follow, integers included.
    assert sorted(names[2:]) == sorted(
        ["frozen", "norm.weight", "norm.bias", "norm.running_mean",
         "norm.running_var", "norm.num_batches_tracked"])
    assert [s.weight_decay for s in specs[:2]] == [True, False]
    assert not any(s.weight_decay for s in specs[2:])
    assert [i for i, _ in extra] == list(range(2, len(specs)))
    assert all(s.initializer.kind == "from_rank0" for s in specs)


def test_tensors_named_alike_or_of_other_dtypes_are_refused():
    net = Net()
    opt = torch.optim.SGD(net.fc.parameters(), lr=0.1)
    trainable = _declaration.trainable_parameters(
        groups(opt), list(net.named_parameters()))
    with pytest.raises(ValueError, match="two tensors named alike"):
        _declaration.tensor_specs(trainable, {"fc.weight": torch.zeros(1)},
                                  [False, False])
    with pytest.raises(TypeError, match="cannot broadcast"):
        _declaration.tensor_specs(
            trainable, {"c": torch.zeros(1, dtype=torch.complex64)},
            [False, False])


# -- _gradients ---------------------------------------------------------------


def backward_twice(p, gradients, index=0):
    """Two backward passes through p, counted as the hooks count them."""
    verdicts = []
    for _ in range(2):
        (p * 2).sum().backward()
        verdicts.append(gradients.backward_pass(index))
    return verdicts


def test_a_gradient_is_pushed_after_the_last_of_its_passes():
    p = torch.nn.Parameter(torch.ones(3))
    gradients = _gradients.StepGradients(["p"], 2, "server")
    assert backward_twice(p, gradients) == [(False, None), (True, None)]
    assert gradients.incomplete() is None


def test_a_pass_more_than_backward_passes_per_step_is_refused():
    p = torch.nn.Parameter(torch.ones(3))
    gradients = _gradients.StepGradients(["p"], 1, "server")
    (first, _), (second, error) = backward_twice(p, gradients)
    assert first and not second
    assert "accumulated the gradient of p 2 times" in error
    assert "backward_passes_per_step=N" in error


def test_a_step_before_the_last_pass_is_refused_unless_a_tensor_reached_it():
    gradients = _gradients.StepGradients(["a", "b"], 3, "server")
    gradients.backward_pass(0)
    gradients.backward_pass(1)
    assert "step() after 1 backward passes" in gradients.incomplete()
    assert "backward_passes_per_step=1" in gradients.incomplete()
    gradients.backward_pass(0)
    gradients.backward_pass(0)
    # b took part in one of the three passes: its sum is complete.
    assert gradients.incomplete() is None
    gradients.reset()
    assert gradients.incomplete() is None


@pytest.mark.parametrize("edit", [
    lambda p: torch.nn.utils.clip_grad_norm_([p], 1e-3),
    lambda p: p.grad.mul_(0.5),
    lambda p: setattr(p, "grad", p.grad * 0.5),
    lambda p: p.grad.zero_(),
])
def test_an_edit_of_a_pushed_gradient_is_found(edit):
    p = torch.nn.Parameter(torch.ones(3))
    (p * 2).sum().backward()
    gradients = _gradients.StepGradients(["p"], 1, "server")
    gradients.pushed(0, p.grad)
    assert gradients.edited([p.grad]) is None
    edit(p)
    error = gradients.edited([p.grad])
    assert "gradient of p changed after backward() pushed it" in error
    assert "optimizer.synchronize()" in error
    assert "with optimizer.skip_synchronize():" in error
    assert "with placement='worker'" in error


def test_the_worker_placement_message_shows_the_pattern_alone():
    p = torch.nn.Parameter(torch.ones(3))
    (p * 2).sum().backward()
    gradients = _gradients.StepGradients(["p"], 1, "worker")
    gradients.pushed(0, p.grad)
    p.grad.mul_(2)
    error = gradients.edited([p.grad])
    assert error.endswith(_gradients.EDIT_PATTERN)


def test_zeros_pushed_for_a_missing_gradient_are_not_checked():
    gradients = _gradients.StepGradients(["p"], 1, "server")
    gradients.pushed(0, None)
    assert gradients.was_pushed(0)
    assert gradients.edited([torch.ones(1)]) is None


def test_backward_passes_per_step_below_one_is_refused():
    with pytest.raises(ValueError, match="backward_passes_per_step must be"):
        _gradients.StepGradients(["p"], 0, "server")


# -- _runtime and the package -----------------------------------------------

# What the package added to torch.py's names, from Horovod's
# horovod/torch/__init__.py (some of them refuse, naming what to use).
_HOROVOD_NAMES = [
    "cross_rank", "cross_size", "mpi_built", "mpi_enabled",
    "mpi_threads_supported", "gloo_built", "gloo_enabled", "nccl_built",
    "ddl_built", "ccl_built", "cuda_built", "rocm_built", "start_timeline",
    "stop_timeline", "Compression", "ProcessSet", "add_process_set",
    "remove_process_set", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "grouped_allreduce", "grouped_allreduce_",
    "grouped_allreduce_async", "grouped_allreduce_async_",
    "sparse_allreduce_async", "allgather", "allgather_async",
    "grouped_allgather", "grouped_allgather_async", "broadcast",
    "broadcast_", "broadcast_async", "broadcast_async_", "alltoall",
    "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "join",
    "barrier", "poll", "synchronize", "broadcast_object", "allgather_object",
    "broadcast_optimizer_state", "SyncBatchNorm"]


def test_before_init_the_calls_say_so():
    assert not ps.is_initialized()
    assert ps._state is None and _runtime.state() is None
    for call in (ps.rank, ps.size, ps.local_rank, ps.local_size, ps.mode):
        with pytest.raises(ValueError, match="call init"):
            call()
    with pytest.raises(ValueError, match="call init"):
        ps.broadcast_parameters(Net().state_dict())
    ps.shutdown()  # Nothing to do, no error.


# Ours, beyond Horovod's: BatchNorm statistics, the metrics' loss.
_OURS = ["average_buffers", "report_loss"]


# Horovod's constants: not callable.
_CONSTANTS = ["Average", "Sum", "Min", "Max", "Adasum", "Product",
              "global_process_set"]


def test_the_package_exports_what_torch_py_did():
    assert sorted(ps.__all__) == sorted([
        "init", "is_initialized", "rank", "size", "local_rank", "local_size",
        "mode", "broadcast_parameters", "DistributedOptimizer", "shutdown",
        "save_model", "load_model"] + _HOROVOD_NAMES + _CONSTANTS + _OURS)
    for name in ps.__all__:
        if name in _CONSTANTS:
            assert getattr(ps, name) is not None, name
        else:
            assert callable(getattr(ps, name)), name
    with pytest.raises(AttributeError):
        ps.no_such_name  # noqa: B018


def test_horovods_elastic_refuses_what_it_cannot_resume():
    # elastic.run and TorchState work (python_torch_elastic_test); a state
    # without the DistributedOptimizer, and ElasticSampler, refuse at once.
    with pytest.raises(ValueError, match="needs the hvd.DistributedOptimizer"):
        ps.elastic.TorchState(torch.nn.Linear(2, 1), epoch=0)
    with pytest.raises(NotImplementedError, match="DistributedSampler"):
        ps.elastic.ElasticSampler(list(range(4)))


# -- the worker's place, from the launcher's environment or a scheduler's ----

_PS_RANKS = ("PS_RANK", "PS_NUM_WORKERS", "PS_LOCAL_RANK",
             "PS_LOCAL_NUM_WORKERS")


def _only(monkeypatch, variables):
    for name in _PS_RANKS + ("PS_NUM_SERVERS", "PS_SERVERS") + tuple(
            n for n in list(os.environ)
            if n.startswith(("SLURM_", "OMPI_COMM_WORLD_"))):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


_SERVERS = {"PS_NUM_SERVERS": "1", "PS_SERVERS": "127.0.0.1:7000"}


def test_the_place_comes_from_the_launchers_variables(monkeypatch):
    _only(monkeypatch, dict(_SERVERS, PS_RANK="2", PS_NUM_WORKERS="4",
                            PS_LOCAL_RANK="0", PS_LOCAL_NUM_WORKERS="2"))
    assert paramserver.worker_place() == (2, 4, 0, 2)


def test_under_srun_the_place_comes_from_slurm(monkeypatch):
    _only(monkeypatch, dict(
        _SERVERS, SLURM_PROCID="5", SLURM_NTASKS="8", SLURM_LOCALID="2",
        SLURM_NODEID="1", SLURM_NNODES="3",
        SLURM_STEP_NODELIST="node[01-02],gpu7",
        SLURM_STEP_TASKS_PER_NODE="3(x2),2", SLURM_JOB_ID="4242"))
    assert paramserver.worker_place() == (5, 8, 2, 3)


def test_under_mpirun_the_place_comes_from_open_mpi(monkeypatch):
    _only(monkeypatch, dict(
        _SERVERS, OMPI_COMM_WORLD_RANK="3", OMPI_COMM_WORLD_SIZE="4",
        OMPI_COMM_WORLD_LOCAL_RANK="1", OMPI_COMM_WORLD_LOCAL_SIZE="2"))
    assert paramserver.worker_place() == (3, 4, 1, 2)


def test_every_missing_variable_is_named_at_once(monkeypatch):
    _only(monkeypatch, {"PS_RANK": "1"})
    with pytest.raises(paramserver.InvalidArgumentError) as error:
        paramserver.worker_place()
    message = str(error.value)
    for name in ("PS_NUM_WORKERS", "PS_LOCAL_NUM_WORKERS", "PS_LOCAL_RANK",
                 "PS_NUM_SERVERS", "PS_SERVERS"):
        assert "$" + name in message


# -- Horovod's names that need no servers -------------------------------------


def test_unsupported_horovod_calls_refuse_at_once_naming_the_alternative():
    import torch
    for call, args, kwargs, advice in [
            (ps.allreduce, (torch.ones(1),), {"op": ps.Adasum}, "Average"),
            (ps.allreduce, (torch.ones(1),), {"op": ps.Product}, "Sum"),
            (ps.alltoall, (torch.ones(1),), {}, "allgather"),
            (ps.reducescatter, (torch.ones(1),), {}, "allreduce"),
            (ps.SyncBatchNorm, (4,), {}, "BatchNorm"),
            (ps.start_timeline, ("t.json",), {}, "Prometheus"),
            (ps.add_process_set, ([0, 1],), {}, "every rank"),
            (ps.ProcessSet, ([0],), {}, "join()")]:
        with pytest.raises(NotImplementedError, match=advice):
            call(*args, **kwargs)
    assert not any(f() for f in (ps.nccl_built, ps.mpi_built, ps.gloo_built))


def test_fp16_compression_rounds_to_half_and_back():
    import torch
    t = torch.tensor([1.0 + 2 ** -12, 3.0], dtype=torch.float32)
    compressed, ctx = ps.Compression.fp16.compress(t)
    assert compressed.dtype == torch.float16
    back = ps.Compression.fp16.decompress(compressed, ctx)
    assert back.dtype == torch.float32
    assert back.tolist() == [1.0, 3.0]  # 2**-12 is below half's precision.
    same, ctx = ps.Compression.none.compress(t)
    assert same is t and ps.Compression.none.decompress(same, ctx) is t


def test_bf16_compression_rounds_to_bfloat16_and_back():
    import torch
    # 1 + 2**-9 is below bfloat16's 8 bits; 1 + 2**-7 is kept; 1e30 is in
    # its range (float32's), unlike half's.
    t = torch.tensor([1.0 + 2 ** -9, 1.0 + 2 ** -7, 1e30],
                     dtype=torch.float32)
    compressed, ctx = ps.Compression.bf16.compress(t)
    assert compressed.dtype == torch.bfloat16
    back = ps.Compression.bf16.decompress(compressed, ctx)
    assert back.dtype == torch.float32
    assert back.tolist()[:2] == [1.0, 1.0 + 2 ** -7]
    assert abs(back.tolist()[2] / 1e30 - 1) < 2 ** -8
    assert ps.Compression.bf16.wire == "bf16"
    ints = torch.tensor([3, 4])
    assert ps.Compression.bf16.compress(ints)[0] is ints


class _ClientBeforeDeclaring:
    """What _State reads of a client: its rank and registration."""
    rank = 1
    registration = None


def test_size_without_the_launchers_variables_comes_from_the_servers(
        monkeypatch):
    # init(servers=[...], rank=1): no PS_NUM_WORKERS to read.
    for name in ("PS_NUM_WORKERS", "WORLD_SIZE", "PS_LOCAL_NUM_WORKERS",
                 "LOCAL_WORLD_SIZE", "PS_LOCAL_RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    client = _ClientBeforeDeclaring()
    state = _runtime._State(client)
    with pytest.raises(ValueError, match="not known yet"):
        state.size  # noqa: B018
    # The servers' reply to the declaration says 2 workers.
    client.registration = types.SimpleNamespace(num_workers=2)
    assert state.size == 2
    assert state.local_size == 2
    assert state.local_rank == 1


def test_size_from_the_environment_wins(monkeypatch):
    monkeypatch.setenv("PS_NUM_WORKERS", "4")
    monkeypatch.setenv("PS_LOCAL_NUM_WORKERS", "2")
    state = _runtime._State(_ClientBeforeDeclaring())
    assert state.size == 4
    assert state.local_size == 2


# -- the end of a script that never called shutdown() ------------------------

class _RecordingClient:
    def __init__(self):
        self.calls = []

    def finish(self):
        self.calls.append("finish")

    def close(self):
        self.calls.append("close")


@pytest.mark.parametrize("crashed", [False, True])
def test_exit_finishes_a_rank_only_when_it_did_not_crash(monkeypatch,
                                                         crashed):
    client = _RecordingClient()
    state = types.SimpleNamespace(client=client, optimizer=None,
                                  finished=False, metrics_server=None)
    monkeypatch.setattr(_runtime, "_state", state)
    optimizer = types.SimpleNamespace(warn_if_untrained=lambda: None)
    state.optimizer = optimizer
    import sys
    if crashed:
        monkeypatch.setattr(sys, "last_type", ValueError, raising=False)
    else:
        monkeypatch.delattr(sys, "last_type", raising=False)
    _runtime._at_exit()
    # Crashed: the servers take the rank for dead, not done.
    assert client.calls == (["close"] if crashed else ["finish", "close"])
