"""A server-placed optimizer's state through torch.save: a job resumed
from a checkpoint of model and optimizer ends with the weights of the run
it was cut from, and the state_dict is torch.optim.Adam's on the same
gradients, within a bound derived from the two implementations'
arithmetic.

Run by //tests:python_torch_optimizer_state_test on Debian's
/usr/bin/python3.
"""

import numpy as np
import pytest
import torch

import python_launch

PROGRAM = "tests/python_torch_optimizer_state_program.py"
EPS = 2.0 ** -24  # float32's unit roundoff.


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_a_resumed_job_matches_the_uninterrupted_run(tmp_path, kind):
    flags = ["--num_servers=2", "--num_workers=2", "--mode=sync"]
    python_launch.run(PROGRAM, ["resume", tmp_path, "full", kind], flags)
    saved = torch.load(tmp_path / "checkpoint.pt")
    state = saved["optimizer"]["state"]
    assert sorted(state) == [0, 1, 2, 3]
    if kind == "adam":
        assert all(s["step"].item() == 3 for s in state.values())
        assert all(s["exp_avg_sq"].abs().sum() > 0 for s in state.values())
    else:
        assert all(s["momentum_buffer"].abs().sum() > 0
                   for s in state.values())
    python_launch.run(PROGRAM, ["resume", tmp_path, "resumed", kind], flags)
    full = torch.load(tmp_path / "full.pt")
    resumed = torch.load(tmp_path / "resumed.pt")
    # Same weights, state and data: the same float operations in the same
    # order (sync steps sum the ranks in rank order), so the same bits.
    for name in full:
        assert torch.equal(full[name], resumed[name]), name
    # Without the optimizer's state it does not.
    python_launch.run(PROGRAM, ["resume", tmp_path, "no_state", kind], flags)
    no_state = torch.load(tmp_path / "no_state.pt")
    assert not torch.equal(full["0.weight"], no_state["0.weight"])


def _moment_bounds(grads, beta1, beta2):
    """Per element, how far two float32 implementations of Adam's moments
    may be apart after len(grads) steps: each computes
    m' = beta1 m + (1 - beta1) g and v' = beta2 v + (1 - beta2) g^2 with at
    most 4 roundings of relative size EPS between them, from
    coefficients 1 - beta that differ (the servers compute 1 - beta in
    float32, torch in double, then rounds it): the difference carries on
    scaled by beta, plus each step's roundings and coefficient gap."""
    b1, b2 = np.float32(beta1), np.float32(beta2)
    a1 = [np.float32(1) - b1, np.float32(1.0 - beta1)]
    a2 = [np.float32(1) - b2, np.float32(1.0 - beta2)]
    da1 = abs(float(a1[0]) - float(a1[1]))
    da2 = abs(float(a2[0]) - float(a2[1]))
    m = v = bound_m = bound_v = 0.0
    for g in grads:
        g = g.astype(np.float64)
        terms_m = abs(float(b1) * m) + float(a1[1]) * abs(g)
        terms_v = abs(float(b2) * v) + float(a2[1]) * g * g
        bound_m = float(b1) * bound_m + 4 * EPS * terms_m + da1 * abs(g)
        bound_v = float(b2) * bound_v + 4 * EPS * terms_v + da2 * g * g
        m = float(b1) * m + float(a1[1]) * g
        v = float(b2) * v + float(a2[1]) * g * g
    return bound_m, bound_v


def test_the_state_dict_is_torch_adams_on_the_same_gradients(tmp_path):
    python_launch.run(PROGRAM, ["against_torch", tmp_path],
                      ["--num_servers=1", "--num_workers=1", "--mode=sync"])
    states = torch.load(tmp_path / "states.pt")
    ours, plain = states["ours"], states["plain"]
    assert ours["param_groups"] == plain["param_groups"]
    assert sorted(ours["state"]) == sorted(plain["state"]) == [0, 1, 2, 3]
    beta1, beta2 = plain["param_groups"][0]["betas"]
    for index in plain["state"]:
        a, b = ours["state"][index], plain["state"][index]
        assert sorted(a) == sorted(b) == ["exp_avg", "exp_avg_sq", "step"]
        assert a["step"].item() == b["step"].item() == len(states["grads"])
        bound_m, bound_v = _moment_bounds(
            [g[index].numpy() for g in states["grads"]], beta1, beta2)
        for key, bound in (("exp_avg", bound_m), ("exp_avg_sq", bound_v)):
            gap = (a[key].double() - b[key].double()).abs().numpy()
            assert (gap <= bound).all(), (index, key, gap.max(),
                                          (gap - bound).max())
            # The bound is tight enough to mean something: far below the
            # values' scale.
            assert bound.max() <= 1e-4 * b[key].abs().max().item(), (
                index, key)
