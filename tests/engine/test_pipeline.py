"""The asynchronous pipeline: admission keeps every consumed batch within eta versions whatever the
timings, a dead generator stops the trainer instead of hanging it, eta = 0 through the generator
thread is the synchronous run exactly, and bad `[pipeline]` input is refused naming the field."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.config import RunConfig
from workbench.engine.pipeline import Pipeline
from workbench.errors import ConfigError, WorkbenchError


def _drive(eta: int, gen_s: list[float], train_s: list[float], steps: int) -> list[tuple[int, int, int]]:
    """A generator and a trainer with the given per-step durations; returns (step, start version,
    staleness when consumed) for every batch the trainer took."""
    def produce(step, version):
        time.sleep(gen_s[step % len(gen_s)])
        return (step, version)

    p = Pipeline(produce, first=1, last=steps, eta=eta, version=0)
    seen = []
    try:
        for step in range(1, steps + 1):
            got, version = p.take(step)
            assert got == step
            seen.append((step, version, (step - 1) - version))
            time.sleep(train_s[step % len(train_s)])
            p.push(step)  # the trainer's weights after `step`: version `step`
    finally:
        p.close()
    return seen


@settings(max_examples=25, deadline=None)
@given(eta=st.integers(0, 3), gen_s=st.lists(st.sampled_from([0.0, 0.001, 0.004]), min_size=1, max_size=5),
       train_s=st.lists(st.sampled_from([0.0, 0.001, 0.004]), min_size=1, max_size=5))
def test_no_consumed_batch_exceeds_eta(eta, gen_s, train_s):
    seen = _drive(eta, gen_s, train_s, steps=8)
    assert [s for s, _, _ in seen] == list(range(1, 9))
    assert all(0 <= stale <= eta for _, _, stale in seen), seen


def test_the_generator_runs_ahead_when_training_is_slow():
    seen = _drive(2, [0.0], [0.02], steps=8)
    assert max(stale for _, _, stale in seen) == 2


def test_eta_zero_waits_for_every_update():
    seen = _drive(0, [0.0], [0.005], steps=6)
    assert all(stale == 0 for _, _, stale in seen)


def test_a_dead_generator_stops_the_trainer():
    def produce(step, version):
        if step == 3:
            raise RuntimeError("out of memory")
        return step

    p = Pipeline(produce, first=1, last=5, eta=1, version=0)
    try:
        assert p.take(1) == 1
        p.push(1)
        assert p.take(2) == 2
        p.push(2)
        with pytest.raises(WorkbenchError, match="generator stopped.*out of memory"):
            p.take(3)
    finally:
        p.close()


@pytest.mark.parametrize("field, value, words", [
    ("max_staleness", -1, "pipeline.max_staleness"),
    ("max_staleness_bound", -2, "pipeline.max_staleness_bound"),
    ("over_provision", 0.5, "pipeline.over_provision"),
    ("correction", "clip", "pipeline.correction"),
    ("correction_level", "batch", "pipeline.correction_level"),
    ("is_cap", 0.5, "pipeline.is_cap"),
    ("partial_rollouts", True, "pipeline.partial_rollouts"),
])
def test_bad_pipeline_input_names_the_field(field, value, words):
    with pytest.raises(ConfigError, match=words):
        RunConfig.from_dict({"pipeline": {field: value}})


def test_pipeline_needs_the_in_process_backend():
    with pytest.raises(ConfigError, match="pipeline.max_staleness.*rollout.backend"):
        RunConfig.from_dict({"pipeline": {"max_staleness": 1}, "rollout": {"backend": "ray"}})


def test_set_staleness_stays_within_the_bound():
    from workbench.allocators import make_allocator
    from workbench.engine.control import LiveSettings

    live = LiveSettings(budget_kind="rollouts", budget=32, allocator=make_allocator("uniform", {"n": 4}),
                        temperature=1.0, eval_every=2, seed=0, staleness=1, staleness_bound=2)
    for bad in (-1, 3, 1.5, True):
        with pytest.raises(ConfigError, match="pipeline.max_staleness"):
            live.set_staleness(bad)
    live.set_staleness(2)
    assert live.staleness == 2 and live.state_dict()["staleness"] == 2


def _record(store_dir, rid):
    from workbench.store import open_store

    with open_store(str(store_dir)) as s:
        r = s.rollouts(rid, limit=100000, columns=None)
        steps = s.run_steps(rid)
    return (r.select(["step", "stage", "prompt_id", "idx", "token_ids", "reward", "advantage", "logprob_sum"]).to_dicts(),
            steps.select(["step", "loss", "grad_norm", "kl", "clip_frac"]).to_dicts(), r)


def test_eta_zero_through_the_generator_thread_is_the_synchronous_run(store_dir, tiny_config):
    """Same seed: the same rollouts and the same losses, whether the trainer generates or a generator
    thread with its own copy of the weights does, held to eta = 0."""
    from workbench.engine import run

    base = dict(steps=3, eval__every=0, eval__at_start=False, model__threads=1)
    a = run(tiny_config(**base), store=str(store_dir))
    b = run(tiny_config(**base, pipeline__max_staleness=0, pipeline__max_staleness_bound=2), store=str(store_dir))
    ra, sa, _ = _record(store_dir, a)
    rb, sb, table = _record(store_dir, b)
    assert len(ra) == 3 * 32 and ra == rb
    assert sa == sb
    assert table["staleness"].to_list() == [0] * len(rb)
    assert (table["version_start"] == table["step"] - 1).all() and (table["segments"] == 1).all()


def test_eta_one_runs_ahead_and_records_its_staleness(store_dir, tiny_config):
    from workbench.engine import run

    seen = []
    rid = run(tiny_config(steps=4, eval__every=0, eval__at_start=False, pipeline__max_staleness=1),
              store=str(store_dir), on_step=lambda s, m: seen.append(m))
    _, _, table = _record(store_dir, rid)
    stale = table["staleness"]
    assert stale.max() <= 1 and set(stale.to_list()) <= {0, 1}
    assert (table["version_end"] == table["version_start"]).all()  # no partial rollouts: one version each
    for key in ("timing_s/generator_busy", "timing_s/trainer_idle", "rollout/staleness_max"):
        assert key in seen[-1], key
