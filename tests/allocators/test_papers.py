"""Each paper's worked examples, and the rules' arithmetic checked by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from workbench.allocators import Budget, Candidate, GroupResult, PromptStats, StepContext, make_allocator
from workbench.allocators.knapsack import rollout_value, solve_knapsack
from workbench.allocators.multistage import extra_rollouts
from workbench.allocators.rank_proportional import rank_allocation
from workbench.allocators.temperature import TemperatureConfig, TemperatureController
from workbench.allocators.uncertainty import half_width
from workbench.allocators.value_tracker import sampling_weight

from .conftest import seen_stats


def ctx_for(cands, budget=1000, batch=None, step=0, seed=0, draw=None, stage=0):
    stats = {c.prompt_id: c.stats for c in cands}
    return StepContext(step, stage, Budget("rollouts", budget), list(cands), stats,
                       np.random.default_rng(seed), draw or (lambda k: []), batch or len(cands))


def cands(n, **kw):
    return [Candidate(f"q{i}", seen_stats(f"q{i}", 4, 8, **kw)) for i in range(n)]


# --- DARS ---------------------------------------------------------------------------------------

def test_dars_equal_treatment_worked_example():
    assert [extra_rollouts(c, 8, 32, "equal") for c in (0, 1, 2, 3)] == [24, 11, 3, 1]
    assert [extra_rollouts(c, 8, 32, "equal") for c in (4, 5, 8)] == [0, 0, 0]


def test_dars_hardness_weighted():
    # a' = 1/16, 1/8, 1/4, 3/8: N(1 - 2a')/(2a') = 56 -> cap 24, 24, 8, 8/3 -> 3
    assert [extra_rollouts(c, 8, 32, "hardness") for c in (0, 1, 2, 3)] == [24, 24, 8, 3]
    assert extra_rollouts(0, 8, 100, "hardness") == 56
    assert extra_rollouts(0, 8, 100, "equal") == 27  # 8 / (4 * 1/16 * 15/16) - 8 = 26.13


def test_dars_allocator_stages_and_update_filter():
    alloc = make_allocator("multistage", {"n": 8, "n_max": 32})
    cs = cands(5)
    ctx = ctx_for(cs, budget=1000)
    assert [g.n for g in alloc.begin_step(ctx)] == [8] * 5
    results = {f"q{i}": GroupResult(f"q{i}", [1.0] * c + [0.0] * (8 - c)) for i, c in enumerate((0, 1, 2, 3, 6))}
    stage2 = alloc.next_stage(ctx_for(cs, budget=960, stage=1), results)
    assert {g.prompt_id: g.n for g in stage2} == {"q0": 24, "q1": 11, "q2": 3, "q3": 1}
    assert alloc.next_stage(ctx_for(cs, budget=960, stage=2), results) == []
    assert not alloc.use_in_update(GroupResult("x", [0.0] * 32))
    assert not alloc.use_in_update(GroupResult("x", [1.0] * 8))
    assert alloc.use_in_update(GroupResult("x", [1.0] + [0.0] * 31))


def test_dars_scales_stage_two_to_the_budget():
    alloc = make_allocator("multistage", {})
    cs = cands(2)
    alloc.begin_step(ctx_for(cs))
    results = {"q0": GroupResult("q0", [0.0] * 8), "q1": GroupResult("q1", [1.0] + [0.0] * 7)}
    # wants 24 + 11 = 35, only 10 left: floor(24*10/35)=6, floor(11*10/35)=3, the spare one to the hardest
    got = {g.prompt_id: g.n for g in alloc.next_stage(ctx_for(cs, budget=10, stage=1), results)}
    assert got == {"q0": 7, "q1": 3}


# --- Knapsack RL --------------------------------------------------------------------------------

def test_knapsack_value_formula():
    assert rollout_value(2, 0.5) == pytest.approx((1 - 0.25 - 0.25) * 0.5 * 0.25)
    assert rollout_value(8, 0.0) == 0.0 and rollout_value(8, 1.0) == 0.0
    v = rollout_value(np.arange(1, 64), 0.2)
    assert np.all(np.diff(v) >= 0)  # more rollouts never lower the value


@pytest.mark.parametrize("seed", range(25))
def test_knapsack_dp_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    items = int(rng.integers(1, 5))
    options = []
    for _ in range(items):
        k = int(rng.integers(1, 5))
        costs = sorted(rng.choice(np.arange(0, 9), size=k, replace=False).tolist())
        if rng.random() < 0.7 and 0 not in costs:
            costs = [0] + costs
        options.append([(c, float(rng.random())) for c in costs])
    cap = int(rng.integers(0, 20))
    feasible = [
        combo for combo in itertools.product(*[range(len(o)) for o in options])
        if sum(options[i][k][0] for i, k in enumerate(combo)) <= cap
    ]
    if not feasible:
        with pytest.raises(ValueError):
            solve_knapsack(options, cap)
        return
    best = max(sum(options[i][k][1] for i, k in enumerate(c)) for c in feasible)
    picks = solve_knapsack(options, cap)
    assert sum(options[i][k][0] for i, k in enumerate(picks)) <= cap
    assert sum(options[i][k][1] for i, k in enumerate(picks)) == pytest.approx(best)


def test_knapsack_allocator_prefers_informative_prompts():
    cs = [Candidate("mid", seen_stats("mid", 3, 8)), Candidate("easy", seen_stats("easy", 40, 40)),
          Candidate("new", PromptStats("new"))]
    grants = {g.prompt_id: g.n for g in make_allocator("knapsack", {}).begin_step(ctx_for(cs, budget=40))}
    assert grants["new"] == 8  # unseen: the default N
    assert grants["mid"] > grants["easy"] >= 2
    assert sum(grants.values()) <= 40
    # too little budget for everyone's minimum: the most valuable get n_min, the rest 0
    grants = {g.prompt_id: g.n for g in make_allocator("knapsack", {"n_unseen": 4}).begin_step(ctx_for(cs, budget=6))}
    assert grants == {"new": 4, "mid": 2, "easy": 0}


# --- GRESO --------------------------------------------------------------------------------------

def test_greso_probability_update():
    alloc = make_allocator("selective", {})
    # target 0.25: easy target 1/12, hard target 1/6
    alloc.update_probabilities(easy=0.2, hard=0.1)
    assert (alloc.p_easy, alloc.p_hard) == pytest.approx((0.49, 0.51))
    alloc.update_probabilities(easy=0.0, hard=0.5)
    assert (alloc.p_easy, alloc.p_hard) == pytest.approx((0.50, 0.50))
    for _ in range(100):
        alloc.update_probabilities(easy=1.0, hard=0.0)
    assert (alloc.p_easy, alloc.p_hard) == pytest.approx((0.05, 0.95))


def test_greso_skip_probability():
    alloc = make_allocator("selective", {})
    assert alloc.keep_probability(Candidate("n", PromptStats("n")))[0] == 1.0
    assert alloc.keep_probability(Candidate("e", seen_stats("e", 8, 8, easy_streak=2)))[0] == pytest.approx(0.25)
    assert alloc.keep_probability(Candidate("h", seen_stats("h", 0, 8, hard_streak=3)))[0] == pytest.approx(0.125)
    assert alloc.keep_probability(Candidate("h", seen_stats("h", 0, 8, hard_streak=10)))[0] == 0.01
    # empirically: prompts on an easy streak of 2 are kept a quarter of the time; new ones always
    easy = [Candidate(f"e{i}", seen_stats(f"e{i}", 8, 8, easy_streak=2)) for i in range(2000)]
    new = [Candidate(f"n{i}", PromptStats(f"n{i}")) for i in range(100)]
    grants = alloc.begin_step(ctx_for(easy + new, budget=10**6, batch=10**4))
    kept = {g.prompt_id for g in grants if g.n > 0}
    assert all(c.prompt_id in kept for c in new)
    assert abs(sum(c.prompt_id in kept for c in easy) / 2000 - 0.25) < 0.03


def test_greso_replaces_skipped_prompts_by_drawing():
    pool = iter([Candidate(f"d{i}", PromptStats(f"d{i}")) for i in range(10)])
    draw = lambda k: [next(pool) for _ in range(k)]  # noqa: E731
    stuck = [Candidate(f"h{i}", seen_stats(f"h{i}", 0, 8, hard_streak=10)) for i in range(4)]
    alloc = make_allocator("selective", {"min_keep_prob": 0.0})
    grants = alloc.begin_step(ctx_for(stuck, batch=4, draw=draw))
    assert sum(g.n > 0 for g in grants) == 4
    assert all(g.n == 0 and "skipped" in g.reason for g in grants[:4])


# --- AR3PO --------------------------------------------------------------------------------------

def test_ar3po_stops_on_first_correct_and_at_cap():
    alloc = make_allocator("until_correct", {"stage_size": 2, "n_max": 6})
    cs = [Candidate("a", seen_stats("a", 3, 8)), Candidate("b", PromptStats("b")), Candidate("c", PromptStats("c"))]
    assert [g.n for g in alloc.begin_step(ctx_for(cs))] == [2, 2, 2]
    res = {"a": GroupResult("a", [0, 1]), "b": GroupResult("b", [0, 0]), "c": GroupResult("c", [0, 0])}
    assert [(g.prompt_id, g.n) for g in alloc.next_stage(ctx_for(cs, stage=1), res)] == [("b", 2), ("c", 2)]
    res["b"].rewards += [0, 0, 0, 0]
    res["c"].rewards += [0, 0]
    assert [(g.prompt_id, g.n) for g in alloc.next_stage(ctx_for(cs, stage=2), res)] == [("c", 2)]
    res["c"].rewards += [0, 0]
    assert alloc.next_stage(ctx_for(cs, stage=3), res) == []
    # reuse: only all-wrong groups of prompts solved at an earlier step ("a" was; "b", "c" never)
    res["a"] = GroupResult("a", [0, 0])
    assert alloc.reuse_requests(res) == ["a"]
    assert make_allocator("until_correct", {"reuse": False}).reuse_requests(res) == []


# --- E3 -----------------------------------------------------------------------------------------

def test_e3_rank_allocation_and_widening_bounds():
    assert rank_allocation([0.1, 0.9, 0.5], 4, 12) == [4, 12, 8]
    assert rank_allocation([0.3], 4, 12) == [8]
    alloc = make_allocator("rank_proportional", {"steps_per_epoch": 50})
    assert [alloc.bounds(s) for s in (0, 49, 50, 100, 10_000)] == [(4, 12), (4, 12), (2, 14), (2, 16), (2, 32)]


def test_e3_temperature_rule():
    ctl = TemperatureController(TemperatureConfig(target_entropy=0.5, vocab_size=18, t_init=1.0))
    assert ctl.update(0.5) == pytest.approx(1.0)
    expected = 1.0 * (1 + 1.0 * math.log(0.5 / 0.25) / (math.log(18) + math.log(math.log(18))))
    assert ctl.update(0.25) == pytest.approx(expected)
    t = ctl.temperature
    assert ctl.update(1.0) < t  # entropy above target: cool down
    assert ctl.update(float("nan")) == ctl.temperature
    for _ in range(200):
        ctl.update(1e-6)
    assert ctl.temperature == 2.0
    ctl.set_params({"t_max": 1.5})
    assert ctl.temperature == 1.5
    fresh = TemperatureController.from_params({"target_entropy": 0.5, "vocab_size": 18})
    fresh.load_state_dict(ctl.state_dict())
    assert fresh.temperature == 1.5


def test_temperature_config_rejects_by_name():
    from workbench.errors import ConfigError

    with pytest.raises(ConfigError, match="vocab_size"):
        TemperatureController.from_params({"vocab_size": 2})
    with pytest.raises(ConfigError, match="t_init"):
        TemperatureController.from_params({"t_init": 5.0})


# --- XRPO-style ---------------------------------------------------------------------------------

def test_xrpo_half_width():
    # t_{0.975, 7} = 2.3646; p~ = 5/10; h = 2.3646 * 0.5 / sqrt(8)
    assert half_width(8, 4, 0.95) == pytest.approx(2.364624 * 0.5 / math.sqrt(8), rel=1e-5)
    assert half_width(8, 4, 0.95) > half_width(16, 8, 0.95)


def test_xrpo_tops_up_the_uncertain_prompt_first():
    alloc = make_allocator("uncertainty", {"n0": 8, "phases": 1, "k": 2, "lam": 0.0})
    cs = cands(2)
    alloc.begin_step(ctx_for(cs))
    res = {"q0": GroupResult("q0", [1.0] * 8), "q1": GroupResult("q1", [1.0] * 4 + [0.0] * 4)}
    grants = alloc.next_stage(ctx_for(cs, budget=2, stage=1), res)
    assert [(g.prompt_id, g.n) for g in grants] == [("q1", 2)]
    assert alloc.next_stage(ctx_for(cs, budget=100, stage=2), res) == []  # one phase only


# --- SPO ----------------------------------------------------------------------------------------

def test_spo_weights_and_tracker():
    assert sampling_weight(0.5, 0.05) == pytest.approx(0.55)
    assert sampling_weight(1.0, 0.05) == pytest.approx(0.05)
    alloc = make_allocator("value_tracker", {"rho": 0.5, "n": 4})
    cs = [Candidate("a", seen_stats("a", 4, 8))]  # alpha 5, beta 5
    alloc.next_stage(ctx_for(cs, stage=1), {"a": GroupResult("a", [1, 1, 1, 0])})
    assert alloc.tracker["a"] == pytest.approx([0.5 * 5 + 3, 0.5 * 5 + 1])


def test_spo_draws_in_proportion_to_weight():
    alloc = make_allocator("value_tracker", {"n": 2, "pool_factor": 2.0})
    cs = [Candidate("mid", seen_stats("mid", 4, 8)), Candidate("solved", seen_stats("solved", 1000, 1000))]
    w_mid, w_solved = sampling_weight(5 / 10, 0.05), sampling_weight(1001 / 1002, 0.05)
    picks = 0
    for seed in range(3000):
        g = alloc.begin_step(ctx_for(cs, batch=1, seed=seed))
        picks += g[0].n > 0
    assert abs(picks / 3000 - w_mid / (w_mid + w_solved)) < 0.03


# --- Adaptive stop ------------------------------------------------------------------------------

def test_adaptive_stop_rules():
    alloc = make_allocator("adaptive_stop", {"confidence": 0.9, "p_trivial": 0.9, "p_hopeless": 0.1})
    fresh = PromptStats("x")
    assert alloc.stop_reason(GroupResult("x", [1, 0]), fresh) == "informative"
    assert alloc.stop_reason(GroupResult("x", [1, 1]), fresh) is None
    assert alloc.stop_reason(GroupResult("x", [1, 1]), seen_stats("x", 40, 40)) == "trivial"  # P(p>=.9) = 1-.9^43
    assert alloc.stop_reason(GroupResult("x", [0, 0]), seen_stats("x", 0, 40)) == "hopeless"
    assert alloc.stop_reason(GroupResult("x", [0] * 16), fresh) == "cap"
    # P(p >= 0.9 | Beta(23, 1)) = 1 - 0.9^23 = 0.911 >= 0.9: stops; Beta(21, 1): 0.891 does not
    assert alloc.stop_reason(GroupResult("x", [1] * 22), fresh) == "cap"
    a = make_allocator("adaptive_stop", {"n_max": 64})
    assert a.stop_reason(GroupResult("x", [1] * 22), fresh) == "trivial"
    assert a.stop_reason(GroupResult("x", [1] * 20), fresh) is None
