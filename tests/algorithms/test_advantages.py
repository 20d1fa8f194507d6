"""Advantage estimators against plain-loop references; zero-signal groups are exactly zero."""

import math

import pytest
import torch

from workbench.algorithms import available_advantages, get_advantage, group_has_signal, register_advantage
from workbench.errors import ConfigError
from f32 import f32_atol

# Groups (non-contiguous ids): 7 mixed, 3 all-zero, 9 mixed, 5 singleton, 4 all 0.1 (not exact in binary).
REWARDS = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0, 0.3, 0.1, 0.1, 0.1])
GROUPS = torch.tensor([7, 7, 7, 7, 3, 3, 3, 3, 9, 9, 9, 9, 5, 4, 4, 4])


def _groups(rewards, groups):
    out = {}
    for i, g in enumerate(groups.tolist()):
        out.setdefault(g, []).append(i)
    return out


def ref_grpo(rewards, groups, eps=1e-6):
    r = rewards.tolist()
    adv = [0.0] * len(r)
    for idx in _groups(rewards, groups).values():
        vals = [r[i] for i in idx]
        if len(set(vals)) < 2:
            continue
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        for i in idx:
            adv[i] = (r[i] - mean) / (std + eps)
    return adv


def ref_dr_grpo(rewards, groups):
    r = rewards.tolist()
    adv = [0.0] * len(r)
    for idx in _groups(rewards, groups).values():
        vals = [r[i] for i in idx]
        if len(set(vals)) < 2:
            continue
        mean = sum(vals) / len(vals)
        for i in idx:
            adv[i] = r[i] - mean
    return adv


def ref_rloo(rewards, groups):
    r = rewards.tolist()
    adv = [0.0] * len(r)
    for idx in _groups(rewards, groups).values():
        if len({r[i] for i in idx}) < 2:
            continue
        for i in idx:
            others = [r[j] for j in idx if j != i]
            adv[i] = r[i] - sum(others) / len(others)
    return adv


@pytest.mark.parametrize("name,ref", [("grpo", ref_grpo), ("dr_grpo", ref_dr_grpo), ("rloo", ref_rloo)])
def test_matches_loop_reference(name, ref):
    adv, metrics = get_advantage(name)(REWARDS, GROUPS)
    assert adv.dtype == torch.float32 and adv.shape == REWARDS.shape
    # float32 group means and stds vs a Python-float loop; advantages are of order 1-3
    assert adv.tolist() == pytest.approx(ref(REWARDS, GROUPS), abs=f32_atol(4.0, 16))
    assert metrics["adv/groups"] == 5
    assert metrics["adv/zero_signal_groups"] == 3  # ids 3, 5, 4
    assert metrics["adv/zero_signal_frac"] == pytest.approx(3 / 5)
    assert metrics["adv/signal_rollouts"] == 8


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_zero_signal_groups_exactly_zero(name):
    adv, _ = get_advantage(name)(REWARDS, GROUPS)
    zero = ~group_has_signal(REWARDS, GROUPS)
    assert zero.tolist() == [False] * 4 + [True] * 4 + [False] * 4 + [True] * 4
    assert (adv[zero] == 0.0).all()
    assert (adv[~zero] != 0.0).any()


def test_rloo_is_scaled_dr_grpo():
    """RLOO's advantage equals n/(n-1) times the group-centred reward."""
    rloo, _ = get_advantage("rloo")(REWARDS[:4], GROUPS[:4])
    dr, _ = get_advantage("dr_grpo")(REWARDS[:4], GROUPS[:4])
    assert torch.allclose(rloo, dr * 4 / 3)


def test_grpo_batch_std_scope():
    adv, _ = get_advantage("grpo")(REWARDS, GROUPS, std_scope="batch")
    dr, _ = get_advantage("dr_grpo")(REWARDS, GROUPS)
    assert torch.allclose(adv, dr / (REWARDS.double().std().float() + 1e-6), rtol=0, atol=f32_atol(4.0, 16))
    with pytest.raises(ValueError, match="std_scope"):
        get_advantage("grpo")(REWARDS, GROUPS, std_scope="nope")


def test_registry_errors_list_valid_names():
    assert available_advantages() == ["dr_grpo", "grpo", "rloo"]
    with pytest.raises(ConfigError, match="valid names: dr_grpo, grpo, rloo"):
        get_advantage("ppo")
    with pytest.raises(ValueError, match="already registered"):
        register_advantage("grpo")(lambda r, g: (r, {}))


def test_shape_mismatch_rejected():
    with pytest.raises(ValueError, match="shape"):
        get_advantage("grpo")(REWARDS, GROUPS[:3])
