"""The training loop on the real (small) organism: rows in every table, parameters move, multi-stage
grants, resume equals an uninterrupted run, zero-signal skipping is exact, live settings."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from workbench.allocators import register_allocator
from workbench.allocators.base import Allocator, Grant
from workbench.engine import resume, run
from workbench.engine.checkpoint import checkpoint_dir, latest_checkpoint, load_checkpoint
from workbench.errors import ConfigError
from workbench.store import open_store
from f32 import assert_f32_close


@dataclass(frozen=True)
class TwoStageConfig:
    n: int = 2
    """Stage-0 rollouts per prompt."""
    extra: int = 2
    """Stage-1 rollouts for prompts with a wrong answer in stage 0."""


@register_allocator("test-two-stage")
class TwoStage(Allocator):
    """Test-only: n rollouts each, then `extra` more for every prompt that got one wrong."""

    Config = TwoStageConfig

    def begin_step(self, ctx):
        return [Grant(c.prompt_id, self.config.n, "stage 0") for c in ctx.candidates]

    def next_stage(self, ctx, results):
        if ctx.stage > 1:
            return []
        return [Grant(pid, self.config.extra, "wrong in stage 0") for pid, g in results.items() if g.correct < g.n]


@register_allocator("test-grants-nothing-on-even-steps")
class EvenStepsIdle(Allocator):
    """Test-only: one rollout each on odd steps, nothing on even steps (as a skipping allocator might)."""

    Config = TwoStageConfig

    def begin_step(self, ctx):
        return [] if ctx.step % 2 == 0 else [Grant(c.prompt_id, 1, "odd step") for c in ctx.candidates]


def _count(st, table, run_id):
    return int(st.sql(f"select count(*) as n from {table} where run_id = ?", [run_id])["n"][0])


def test_three_step_run_fills_every_table_and_moves_parameters(store_dir, tiny_config):
    cfg = tiny_config()
    seen = []
    rid = run(cfg, store=str(store_dir), on_step=lambda s, m: seen.append((s, m)))
    assert [s for s, _ in seen] == [0, 1, 2, 3]
    with open_store(str(store_dir)) as st:
        assert st.run(rid)["status"] == "finished"
        assert _count(st, "steps", rid) == 3
        assert _count(st, "rollouts", rid) == 3 * 32
        assert _count(st, "allocations", rid) == 3 * 8
        assert _count(st, "prompt_stats", rid) >= 8
        assert _count(st, "prompts", rid) > 0
        # evals at step 0 (warm start), 2 (every 2) and 3 (the end), 12 prompts each
        assert sorted(st.evals(rid)["step"].unique().to_list()) == [0, 2, 3]
        assert _count(st, "evals", rid) == 3 * 12
        assert _count(st, "events", rid) >= 1
        r = st.rollouts(rid, limit=1000, columns=None)
        steps = st.run_steps(rid)
    assert (r["token_entropy"].list.len() == r["length"]).all()
    assert (r["token_ids"].list.len() == r["length"]).all()
    assert r["verdict"].null_count() == 0 and r["response"].null_count() == 0
    assert steps["zero_signal_frac"].is_between(0, 1).all()
    assert steps["tokens_generated"].sum() == r["length"].sum()
    assert set(steps["allocator"].to_list()) == {"uniform"}
    m = seen[-1][1]
    for key in ("rollout/zero_signal_frac", "rollout/tokens_generated", "alloc/budget", "train/lr",
                "train/optimizer_steps", "timing_s/generate", "perf/rollouts_per_s"):
        assert key in m, key
    # a loss exactly on the steps that updated (a step with no signal skips it: the sampler decides which)
    assert all(("train/loss" in mk) == (mk["train/optimizer_steps"] > 0) for k, mk in seen if k > 0)
    # token-entropy quantiles of the step, around its mean, computed over the step's tokens
    last = r.filter(r["step"] == seen[-1][0])
    tokens = np.concatenate(last["token_entropy"].to_list())
    assert m["rollout/entropy_p10"] <= m["rollout/entropy_p50"] <= m["rollout/entropy_p90"]
    assert m["rollout/entropy_p50"] == pytest.approx(float(np.quantile(tokens, 0.5)), rel=1e-4, abs=1e-6)
    # parameters changed: final checkpoint vs the organism's weights
    from workbench.models.sources import run_model_dir
    from workbench.models import load_model

    start, _ = load_model(str(run_model_dir(cfg, store_dir)))
    final = load_checkpoint(latest_checkpoint(checkpoint_dir(store_dir, rid)))["model"]
    changed = [k for k, v in start.state_dict().items() if not torch.equal(v, final[k])]
    assert changed, "no parameter moved in 3 steps"


def test_multistage_grants_inside_a_step(store_dir, tiny_config):
    cfg = tiny_config(allocator__name="test-two-stage", allocator__params={}, allocator__budget=40, steps=2,
                      eval__every=0, eval__at_start=False)
    rid = run(cfg, store=str(store_dir))
    with open_store(str(store_dir)) as st:
        alloc = st.allocations(rid)
        r = st.rollouts(rid, limit=1000)
    assert set(alloc["stage"].to_list()) == {0, 1}
    assert set(r["stage"].to_list()) == {0, 1}
    per_step = r.group_by("step").len()
    assert (per_step["len"] <= 40).all(), "the engine let the budget be exceeded"
    # pooled groups: indices run 0..k-1 over both stages
    for (step, pid), g in r.group_by(["step", "prompt_id"]):
        assert sorted(g["idx"].to_list()) == list(range(g.height))
    # the stage-1 grants were cut to the budget and say so
    s1 = alloc.filter(alloc["stage"] == 1)
    assert (s1["granted"] <= s1["asked"]).all()
    assert (alloc["budget_left"] >= 0).all()


def test_a_step_granted_nothing_is_logged_and_the_run_goes_on(store_dir, tiny_config):
    cfg = tiny_config(allocator__name="test-grants-nothing-on-even-steps", allocator__params={}, steps=3,
                      eval__every=0, eval__at_start=False)
    rid = run(cfg, store=str(store_dir))
    with open_store(str(store_dir)) as st:
        assert st.run(rid)["status"] == "finished"
        steps = st.run_steps(rid)
        r = st.rollouts(rid, limit=1000)
        events = st.events(rid)
    assert steps["step"].to_list() == [1, 2, 3]
    assert sorted(r["step"].unique().to_list()) == [1, 3]
    empty = events.filter(events["kind"] == "empty_step")
    assert empty["step"].to_list() == [2] and empty["level"].to_list() == ["warning"]
    assert "granted no rollouts" in empty["message"][0]


def _rollouts(store_dir, rid):
    with open_store(str(store_dir)) as st:
        df = st.rollouts(rid, limit=100000)
    return df.select(["step", "stage", "prompt_id", "idx", "token_ids", "reward", "advantage", "logprob_sum"]).to_dicts()


def test_resume_equals_uninterrupted(store_dir, tiny_config):
    cfg = tiny_config(steps=4, eval__every=0)
    a = run(cfg, store=str(store_dir))
    b = run(cfg, store=str(store_dir), stop_after=3)
    with open_store(str(store_dir)) as st:
        assert st.run(b)["status"] == "stopped"
    # crash after step 3 with the last checkpoint at step 2: drop step 3's checkpoint
    ckpts = checkpoint_dir(store_dir, b)
    (ckpts / "step-000003.pt").unlink()
    assert latest_checkpoint(ckpts).name == "step-000002.pt"
    resume(str(store_dir), b)
    with open_store(str(store_dir)) as st:
        assert st.run(b)["status"] == "finished"
        assert st.run_steps(b)["step"].to_list() == [1, 2, 3, 4]
    ra, rb = _rollouts(store_dir, a), _rollouts(store_dir, b)
    assert len(ra) == len(rb) == 4 * 32
    assert ra == rb


def test_zero_signal_skip_is_exact(store_dir, tiny_config):
    """Skipping zero-variance groups in the forward pass gives the same update as including them."""
    from workbench.engine.batch import rollout_stage
    from workbench.engine.update import policy_update
    from workbench.engine.setup import build_setup
    from workbench.engine.timing import PhaseTimer

    cfg = tiny_config(optim__grad_clip=0.0)
    states = []
    for skip in (True, False):
        s = build_setup(cfg, store_dir=store_dir, run_id="x")
        # plain SGD with lr 1: the parameter change is exactly minus the gradient (Adam would hide its scale)
        sgd = torch.optim.SGD(s.model.parameters(), lr=1.0)
        s = dataclasses.replace(s, optimizer=sgd, scheduler=torch.optim.lr_scheduler.LambdaLR(sgd, lambda k: 1.0))
        before = {k: v.clone() for k, v in s.model.state_dict().items()}
        rows = [i for i in range(8) for _ in range(4)]
        g = torch.Generator().manual_seed(0)
        r = rollout_stage(s, rows, 0, 1.0, g, PhaseTimer())
        gidx = np.repeat(np.arange(8), 4)
        rewards = r.rewards.copy()
        rewards[:4] = 1.0  # group 0: all correct (zero signal)
        rewards[4:8] = 0.0  # group 1: all wrong
        rewards[8:12] = [1, 0, 0, 1]
        r.rewards = rewards
        means = np.array([rewards[gidx == k].mean() for k in range(8)])
        stds = np.array([rewards[gidx == k].std(ddof=1) for k in range(8)])
        adv = (rewards - means[gidx]) / (stds[gidx] + 1e-6)
        signal = stds[gidx] > 0
        assert not signal[:8].any() and signal[8:12].all()
        policy_update(s, r, adv, np.ones(32, bool), signal if skip else np.ones(32, bool),
                      np.random.default_rng(0))
        states.append({k: before[k] - v for k, v in s.model.state_dict().items()})
    assert any(bool(g.abs().max() > 0) for g in states[0].values())
    # The two batches hold different rows, so each gradient entry sums its ~32 x 12 token terms (and
    # the 512-wide layers' products) in another order: equal up to float32 rounding at the scale of the
    # tensor's largest entry (entries near zero are differences of larger terms).
    for k in states[0]:
        scale = float(states[1][k].abs().max())
        assert_f32_close(states[0][k], states[1][k], terms=32 * 12 * 512, scale=max(scale, 1e-12))


def test_live_settings_reject_bad_values_and_keep_state():
    from workbench.allocators import make_allocator
    from workbench.control.protocol import Controllable
    from workbench.engine.control import LiveSettings

    live = LiveSettings(budget_kind="rollouts", budget=32, allocator=make_allocator("uniform", {"n": 4}),
                        temperature=1.0, eval_every=2, seed=0)
    assert isinstance(live, Controllable)
    for call in (lambda: live.set_budget("seconds", 3), lambda: live.set_budget("rollouts", 0),
                 lambda: live.set_allocator("nope", {}), lambda: live.set_allocator("uniform", {"n": -1}),
                 lambda: live.set_allocator_params({"bogus": 1}), lambda: live.set_temperature(0),
                 lambda: live.set_eval_interval(-2)):
        with pytest.raises(ConfigError):
            call()
    assert (live.budget_kind, live.budget, live.allocator.name, live.allocator.config.n, live.temperature,
            live.eval_every) == ("rollouts", 32, "uniform", 4, 1.0, 2)
    live.set_budget("tokens", 500)
    live.set_allocator_params({"n": 2})
    live.set_temperature(0.7)
    assert (live.budget_kind, live.budget, live.allocator.config.n, live.temperature) == ("tokens", 500, 2, 0.7)


@pytest.mark.parametrize("deterministic", [True, False])
def test_setup_applies_deterministic_kernels(store_dir, tiny_config, deterministic):
    """`model.deterministic` switches torch's deterministic kernels (on by default): without them two
    default CPU runs beside each other parted at step 5-6 (dev/LOG.md, fourth session)."""
    from workbench.engine.setup import build_setup

    before = torch.are_deterministic_algorithms_enabled()
    try:
        build_setup(tiny_config(model__deterministic=deterministic), store_dir=store_dir, run_id="x")
        assert torch.are_deterministic_algorithms_enabled() is deterministic
    finally:
        torch.use_deterministic_algorithms(before)
