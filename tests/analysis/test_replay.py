"""The what-if replay: a run replayed under its own allocator reproduces its logged decisions; other
allocators are served from the logged outcomes and their spend and informative groups are counted."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from workbench.analysis.replay import (
    Outcomes,
    compare_allocators,
    logged_result,
    logged_steps,
    replay,
    replay_run,
    summarize_steps,
)
from workbench.errors import ConfigError, DataError


def logged_uniform_run(steps: int = 6, prompts: int = 24, batch: int = 6, n: int = 4, seed: int = 0,
                       budget: int | None = None) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Frames of a uniform run written the way the engine logs one, with its own bookkeeping (a plain
    Beta posterior per prompt) rather than the replay's code: `batch` prompts a step in a rotating order,
    `n` rollouts each while the budget pays for whole groups."""
    rng = np.random.default_rng(seed)
    rate = rng.beta(0.7, 0.7, size=prompts)
    budget = budget if budget is not None else batch * n
    post = {i: [1.0, 1.0] for i in range(prompts)}
    alloc, rolls, stats = [], [], []
    for step in range(1, steps + 1):
        left = budget
        for k in range(batch):
            i = (step * batch + k) % prompts
            pid = f"q{i:03d}"
            a, b = post[i]
            g = n if left >= n else 0
            reason = f"uniform: group of {n}" if g else f"uniform: budget exhausted ({left} left < {n})"
            left -= g
            alloc.append(dict(step=step, stage=0, prompt_id=pid, allocator="uniform", asked=g, granted=g,
                              reason=reason, predicted_pass=a / (a + b), alpha_before=a, beta_before=b,
                              budget_kind="rollouts", budget=budget, budget_left=left, used_in_update=g > 0))
            rewards = (rng.random(g) < rate[i]).astype(float)
            for j, r in enumerate(rewards):
                rolls.append(dict(step=step, stage=0, prompt_id=pid, idx=j, reward=float(r),
                                  length=int(rng.integers(3, 9)), off_policy=False))
            if g:
                c = float(rewards.sum())
                post[i] = [a + c, b + g - c]
            a, b = post[i]
            stats.append(dict(step=step, prompt_id=pid, alpha=a, beta=b, pass_mean=a / (a + b)))
    return pl.DataFrame(alloc), pl.DataFrame(rolls), pl.DataFrame(stats)


KEY = ["step", "stage", "prompt_id", "granted", "reason"]


def test_own_allocator_reproduces_logged_grants():
    alloc, rolls, stats = logged_uniform_run()
    r = replay(alloc, rolls, stats, allocator="uniform", params={"n": 4}, seed=0)
    assert r.grants.select(KEY).equals(alloc.select(KEY))
    # replayed statistics follow the logged ones: the same posterior means were predicted
    assert np.allclose(r.grants["predicted_pass"].to_numpy(), alloc["predicted_pass"].to_numpy())
    # every rollout came from the step's own observations, and the spend equals the log's
    assert r.steps["from_observed"].sum() == rolls.height
    assert r.steps.select("from_resampled", "from_nearby", "from_prior").sum().row(0) == (0, 0, 0)
    logged = logged_result(alloc, rolls)
    assert r.steps.select("step", "rollouts", "tokens", "groups", "informative_groups").equals(
        logged.select("step", "rollouts", "tokens", "groups", "informative_groups"))


def test_own_allocator_reproduces_budget_exhaustion_and_logged_stats():
    alloc, rolls, stats = logged_uniform_run(batch=6, n=4, budget=18)
    assert (alloc["granted"] == 0).sum() > 0
    for mode in ("replayed", "logged"):
        r = replay(alloc, rolls, stats, allocator="uniform", params={"n": 4}, stats=mode)
        assert r.grants.select(KEY).equals(alloc.select(KEY)), mode
        assert np.allclose(r.grants["predicted_pass"].to_numpy(), alloc["predicted_pass"].to_numpy()), mode


def test_same_seed_same_replay_and_bigger_groups_resample():
    alloc, rolls, stats = logged_uniform_run()
    kw = dict(allocator="uniform", params={"n": 8}, seed=3, budget=48, extrapolate="empirical")
    a = replay(alloc, rolls, stats, **kw)
    b = replay(alloc, rolls, stats, **kw)
    assert a.groups.equals(b.groups) and a.steps.equals(b.steps)
    # groups of 8 over logged groups of 4: half observed, half resampled with replacement
    assert int(a.steps["from_observed"].sum()) == int(a.steps["from_resampled"].sum()) == rolls.height
    # an empirically resampled group only holds rewards its prompt showed at that step
    seen = rolls.group_by("step", "prompt_id").agg(pl.col("reward").unique().alias("vals"))
    g = a.groups.join(seen, on=["step", "prompt_id"])
    for row in g.iter_rows(named=True):
        if row["correct"] in (0, row["n"]):
            continue
        assert set(row["vals"]) == {0.0, 1.0}


def test_posterior_extrapolation_can_find_signal_the_log_lacked():
    rolls = pl.DataFrame(dict(step=[1] * 4, stage=[0] * 4, prompt_id=["a"] * 4, idx=[0, 1, 2, 3],
                              reward=[0.0] * 4, length=[3] * 4, off_policy=[False] * 4))
    alloc = pl.DataFrame(dict(step=[1], stage=[0], prompt_id=["a"], granted=[4], budget_kind=["rollouts"],
                              budget=[64]))
    found = {mode: sum(replay(alloc, rolls, allocator="uniform", params={"n": 64}, seed=s,
                              extrapolate=mode).summary()["informative_groups"] for s in range(20))
             for mode in ("empirical", "posterior")}
    assert found["empirical"] == 0
    # 60 more draws at p ~ Beta(1, 5): at least one success in most replays
    assert found["posterior"] >= 10
    with pytest.raises(DataError, match="extrapolate"):
        replay(alloc, rolls, allocator="uniform", extrapolate="magic")


def test_dynamic_sampling_draws_beyond_the_candidates_and_counts_informative_groups():
    alloc, rolls, stats = logged_uniform_run(steps=5, prompts=40, batch=8, n=4)
    r = replay(alloc, rolls, stats, allocator="dynamic_sampling",
               params={"n": 4, "max_rounds": 3}, budget=96, prompts_per_step=8)
    s = r.summary()
    assert s["rollouts"] <= 96 * 5
    assert s["informative_groups"] == int(r.groups["has_signal"].sum())
    # it drew prompts the run did not have at that step (served from their nearest step)
    assert r.steps["from_nearby"].sum() > 0
    # only informative groups enter its update
    assert not (r.groups["used_in_update"] & ~r.groups["has_signal"]).any()
    base = replay(alloc, rolls, stats, allocator="uniform", params={"n": 4})
    assert s["informative_groups"] >= base.summary()["informative_groups"]


def test_selective_skips_and_logged_stats_mode():
    alloc, rolls, stats = logged_uniform_run(steps=8, prompts=12, batch=6, n=4)
    r = replay(alloc, rolls, stats, allocator="selective", params={}, stats="logged")
    assert r.grants.height >= alloc.height // 2
    assert set(r.grants["step"].unique().to_list()) == set(alloc["step"].unique().to_list())


def test_summary_and_logged_result_agree_on_a_hand_count():
    rolls = pl.DataFrame(dict(step=[1] * 6, stage=[0] * 6, prompt_id=["a", "a", "a", "b", "b", "b"],
                              idx=[0, 1, 2, 0, 1, 2], reward=[1.0, 0.0, 1.0, 1.0, 1.0, 1.0],
                              length=[2] * 6, off_policy=[False] * 6))
    alloc = pl.DataFrame(dict(step=[1, 1], stage=[0, 0], prompt_id=["a", "b"], granted=[3, 3],
                              budget_kind=["rollouts"] * 2, budget=[6, 6], used_in_update=[True, True]))
    s = summarize_steps(logged_result(alloc, rolls))
    assert (s["rollouts"], s["groups"], s["informative_groups"], s["tokens"]) == (6, 2, 1, 12)
    assert s["zero_signal_frac"] == pytest.approx(0.5)
    assert s["informative_per_1k"] == pytest.approx(1000 / 6)


def test_outcomes_serve_prior_for_unseen_prompts_and_nearest_step():
    rolls = pl.DataFrame(dict(step=[2, 2, 5], prompt_id=["a", "a", "a"], reward=[1.0, 0.0, 1.0]))
    o = Outcomes(rolls, seed=0)
    assert o.source_step(3, "a") == 2 and o.source_step(4, "a") == 5 and o.source_step(9, "zz") is None
    o.start_step(3)
    _, _, counts = o.draw("zz", 5, prior=1.0)
    assert counts["prior"] == 5
    rewards, _, counts = o.draw("a", 3, prior=0.0)
    assert counts["nearby"] == 3 and set(rewards) <= {0.0, 1.0}


def test_bad_inputs_are_named():
    alloc, rolls, stats = logged_uniform_run(steps=2)
    with pytest.raises(DataError, match="budget_kind"):
        logged_steps(alloc.drop("budget_kind"))
    with pytest.raises(DataError, match="reward"):
        replay(alloc, rolls.drop("reward"), allocator="uniform")
    with pytest.raises(ConfigError, match="nope"):
        replay(alloc, rolls, allocator="nope")
    with pytest.raises(DataError, match="stats"):
        replay(alloc, rolls, allocator="uniform", stats="other")


class FakeStore:
    """The four store readers the replay uses, over in-memory frames."""

    def __init__(self, alloc, rolls, stats, config):
        from workbench.correctness import with_correct

        # the store keeps each rollout's verdict (`correct`) next to its reward
        self.alloc, self.rolls, self.stats, self.config = alloc, with_correct(rolls), stats, config

    def run(self, run_id):
        return {"run_id": run_id, "seed": 0, "config": self.config}

    def count_rollouts(self, run_id):
        return self.rolls.height

    def rollouts(self, run_id, *, limit=50, offset=0, columns=None):
        return self.rolls.select(columns).slice(offset, limit)

    def allocations(self, run_id):
        return self.alloc

    def prompt_stats(self, run_id):
        return self.stats


def test_replay_run_defaults_to_the_runs_own_allocator_and_compare():
    alloc, rolls, stats = logged_uniform_run()
    store = FakeStore(alloc, rolls, stats, {"seed": 0, "allocator": {"name": "uniform", "params": {"n": 4},
                                                                      "prompts_per_step": 6}})
    r = replay_run(store, "r1")
    assert r.allocator == "uniform" and r.params == {"n": 4}
    assert r.grants.select(KEY).equals(alloc.select(KEY))
    table = compare_allocators(store, "r1", {"uniform n=8": ("uniform", {"n": 8})}, seeds=2, budget=48)
    assert table["label"].to_list() == ["logged", "uniform n=8", "uniform n=8"]
    assert table.filter(pl.col("label") == "logged")["rollouts"][0] == rolls.height
    assert table["observed_frac"].null_count() == 0 and table["observed_frac"][0] == 1.0
