"""AEPO's rollout (`workbench.rollout.shapes.arpo`, `workbench.rollout.episode_decode`) and ARPO's hard
attribution, against hand-computed cases: the split between whole episodes and branch slots, the probe's
entropies, the branch rule with its consecutive-branch penalty (and its sign against ARPO's), the count of
consecutive branching rounds, and the hard advantage of a small tree (and its mapping from stored slots)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from workbench.config.algorithm import AlgorithmConfig
from workbench.config.shapes import EpisodesConfig
from workbench.engine.episode_filter import trained_advantages
from workbench.errors import ConfigError
from workbench.engine.steplog import Rollouts
from workbench.rollout.episode_decode import Branching, RowTurn, aepo_branches, branches
from workbench.rollout.branching import BranchTree as _Tree
from workbench.rollout.shapes import empty_columns
from workbench.rollout.shapes.arpo import aepo_split_size, hard_advantages, probe_dh
from workbench.rollout.shapes.tree import shared_credit


@pytest.mark.parametrize("n, dh, want", [
    (8, 0.0, 5),     # int(8 * 0.5) + 1
    (8, 2.0, 6),     # sigmoid(1) = 0.7311: int(5.849) + 1
    (8, -2.0, 3),    # sigmoid(-1) = 0.2689: int(2.151) + 1
    (16, 1.0, 10),   # sigmoid(0.5) = 0.6225: int(9.96) + 1
    (1, 0.0, 1),     # int(0.5) + 1
    (4, 100.0, 4),   # int(4.0) + 1 = 5, capped at the group
])
def test_the_split(n, dh, want):
    assert aepo_split_size(n, dh, 0.5) == want


def test_the_probe_entropies_over_window_and_log_vocab():
    ln10 = math.log(10)
    turns = [RowTurn("assistant", [1, 2, 3], entropy=[1.0, 1.0, 5.0]), RowTurn("tool", [9]),
             RowTurn("assistant", [4], entropy=[0.5]), RowTurn("tool", [9]), RowTurn("assistant", [5, 6],
                                                                                   entropy=[0.25, 0.25])]
    # window 2: root (1 + 1) / ln 10; after the tools 0.5 / ln 10 and 0.5 / ln 10
    assert probe_dh(turns, 2, 10) == pytest.approx(2 / ln10 - 0.5 / ln10)
    assert probe_dh(turns[:1], 2, 10) == 0.0  # no call: no tool entropy, dh 0
    assert probe_dh([], 2, 10) == 0.0


@pytest.mark.parametrize("u, before, after, c, want", [
    (0.5, 1.0, 1.0, 0, True),    # dH = 0, no penalty: u >= 0.5 branches
    (0.49, 1.0, 1.0, 0, False),
    (0.5, 1.0, 1.0, 1, False),   # 0.5 * 0.95 = 0.475
    (0.6, 1.0, 1.5, 2, True),    # (0.6 + 0.1) * 0.9 = 0.63
    (0.6, 1.0, 1.5, 6, False),   # 0.7 * 0.7 = 0.49
    (0.35, 0.0, 1.0, 0, True),   # entropy rose: 0.35 + 0.2 = 0.55
    (0.85, 2.0, 0.0, 0, False),  # entropy fell: 0.85 - 0.4 = 0.45
])
def test_the_branch_rule_with_the_penalty(u, before, after, c, want):
    assert aepo_branches(u, before, after, 0.2, 0.5, 0.05, c) == want


def test_without_the_penalty_the_rule_branches_as_often_as_arpos():
    """AEPO's u + alpha dH >= t against ARPO's u - alpha dH <= t: mirrored, the same chance over a uniform u."""
    grid = (np.arange(10_000) + 0.5) / 10_000
    for before, after in ((1.0, 1.0), (0.0, 1.0), (1.5, 0.0)):
        a = np.mean([aepo_branches(u, before, after, 0.2, 0.5, 0.05, 0) for u in grid])
        b = np.mean([branches(u, before, after, 0.2, 0.5) for u in grid])
        assert a == pytest.approx(b, abs=2e-4) and a == pytest.approx(0.5 + 0.2 * (after - before), abs=2e-4)


def test_consecutive_rounds_count_back_from_the_call():
    tree = _Tree(Branching(slots={7: 3}, penalty=0.05), [], None)
    assert tree.consecutive(7, 1) == 0
    tree.branched[7] = {1, 2, 4}
    assert [tree.consecutive(7, k) for k in (1, 2, 3, 4, 5, 6)] == [0, 1, 2, 0, 1, 0]
    assert tree.consecutive(8, 3) == 0  # another group


PARENT, AT, ADV = [-1, -1, 0, 2], [-1, -1, 3, 5], [1.0, -1.0, 0.5, -0.5]


def test_hard_advantages_of_a_small_tree():
    """Row 2 branched from row 0 at 3, row 3 from row 2 at 5, row 1 alone: positions 0-2 are shared by rows 0, 2,
    3 (mean 1/3), positions 3-4 by rows 2 and 3 (mean 0); every other token keeps its row's advantage."""
    got = hard_advantages(PARENT, AT, ADV, 7)
    t = 1 / 3
    want = [[t, t, t, 1, 1, 1, 1], [-1] * 7, [t, t, t, 0, 0, 0.5, 0.5], [t, t, t, 0, 0, -0.5, -0.5]]
    np.testing.assert_allclose(got, want, atol=1e-12)
    # the mean is LATR's summed credit (`shared_credit`) over the number of rows holding the token
    total = shared_credit(PARENT, AT, [7] * 4, ADV)
    count = [[3, 3, 3, 1, 1, 1, 1], [1] * 7, [3, 3, 3, 2, 2, 1, 1], [3, 3, 3, 2, 2, 1, 1]]
    np.testing.assert_allclose(np.stack(total), got * np.asarray(count), atol=1e-12)
    # no branch: every row its own advantage
    np.testing.assert_allclose(hard_advantages([-1, -1], [-1, -1], [2.0, 3.0], 2), [[2, 2], [3, 3]])


def test_the_update_gets_hard_advantages_from_the_stored_slots():
    """Two groups of a stage (prompt 5: rows 0-1; prompt 7: rows 2-4); row 4 branched from its group's slot 0
    (row 2) at 2. Soft, or no branch: the row advantages as they are."""
    r = Rollouts.empty()
    r.tokens, r.lengths = torch.zeros((5, 4), dtype=torch.long), torch.tensor([4, 4, 4, 4, 4])
    r.prompt, r.stage = np.array([5, 5, 7, 7, 7]), np.zeros(5, dtype=np.int64)
    r.shape = empty_columns(5, "episodes")
    adv = np.array([1.0, -1.0, 0.6, 0.0, -0.2])
    assert trained_advantages(r, adv, "hard") is adv  # no branch yet
    r.shape["parent_idx"], r.shape["branch_at"] = np.array([-1, -1, -1, -1, 0]), np.array([-1, -1, -1, -1, 2])
    assert trained_advantages(r, adv, "soft") is adv
    got = trained_advantages(r, adv, "hard")
    np.testing.assert_allclose(got, [[1] * 4, [-1] * 4, [0.2, 0.2, 0.6, 0.6], [0] * 4, [0.2, 0.2, -0.2, -0.2]])


def test_hard_equals_soft_under_the_token_mean_and_not_under_the_sequence_mean():
    """On the small tree, on-policy (ratio 1): a token shared by k rows enters the loss k times with one ratio, so
    k x the mean advantage is soft's sum under the token mean (same loss, same gradient); the sequence mean weighs
    each copy by 1 / its row's length, and the two differ."""
    from workbench.algorithms import get_policy_loss

    g = torch.Generator().manual_seed(0)
    logp = torch.randn((4, 7), generator=g, dtype=torch.float64) * 0.5
    logp[2, :3] = logp[0, :3]  # a branch holds its parent's tokens, so their log-probs
    logp[3, :5] = logp[2, :5]
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 6 + [0], [1] * 7])
    soft = torch.tensor(ADV, dtype=torch.float64)
    hard = torch.as_tensor(hard_advantages(PARENT, AT, ADV, 7))
    losses = {}
    for agg in ("token", "sequence"):
        for name, adv in (("soft", soft), ("hard", hard)):
            x = logp.clone().requires_grad_(True)
            loss, _ = get_policy_loss("ppo_clip")(x, x.detach(), adv, mask, clip_low=0.2, clip_high=0.28,
                                                  aggregation=agg)
            (grad,) = torch.autograd.grad(loss, x)
            # the gradient on a shared token, summed over its copies: what the shared token receives
            losses[agg, name] = (float(loss), float(grad[0, 0] + grad[2, 0] + grad[3, 0]))
    assert losses["token", "soft"] == pytest.approx(losses["token", "hard"], abs=1e-12)
    assert losses["sequence", "soft"][1] != pytest.approx(losses["sequence", "hard"][1], abs=1e-6)


@pytest.mark.parametrize("make, field", [
    (lambda: EpisodesConfig(aepo_branch=True, arpo_branch=True), "rollout.episodes.aepo_branch"),
    (lambda: EpisodesConfig(arpo_advantage="medium"), "rollout.episodes.arpo_advantage"),
    (lambda: EpisodesConfig(aepo_beta=-1.0), "rollout.episodes.aepo_beta"),
    (lambda: EpisodesConfig(aepo_penalty=1.5), "rollout.episodes.aepo_penalty"),
    (lambda: AlgorithmConfig(entropy_advantage=-0.2), "algorithm.entropy_advantage"),
])
def test_a_bad_setting_is_refused_naming_its_field(make, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        make()
