"""The asynchronous pipeline: admission keeps every consumed batch within eta versions whatever the
timings, a dead generator stops the trainer instead of hanging it, eta = 0 through a generator process
or thread is the synchronous run exactly, eta = 1 runs ahead (and with partial rollouts cuts some),
and bad `[pipeline]` input is refused naming the field."""

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
    seen = _drive(2, [0.0], [0.05], steps=8)
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
    ("partial_rollouts", "yes", "pipeline.partial_rollouts"),
])
def test_bad_pipeline_input_names_the_field(field, value, words):
    with pytest.raises(ConfigError, match=words):
        RunConfig.from_dict({"pipeline": {field: value}})


def test_pipeline_needs_an_in_process_generator_or_ray_workers():
    with pytest.raises(ConfigError, match="pipeline.max_staleness.*rollout.backend"):
        RunConfig.from_dict({"pipeline": {"max_staleness": 1}, "rollout": {"backend": "vllm"}})
    with pytest.raises(ConfigError, match="pipeline.partial_rollouts.*Ray workers"):
        RunConfig.from_dict({"pipeline": {"max_staleness": 1, "partial_rollouts": True}, "rollout": {"backend": "ray"}})


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


@pytest.mark.parametrize("generator", ["process", "thread"])
def test_eta_zero_through_a_generator_process_or_thread_is_the_synchronous_run(store_dir, tiny_config, generator):
    """Same seed: the same rollouts and the same losses, whether the trainer generates or a generator
    (a child process, or a thread) with its own copy of the weights does, held to eta = 0."""
    from workbench.engine import run

    base = dict(steps=3, eval__every=0, eval__at_start=False, model__threads=1)
    a = run(tiny_config(**base), store=str(store_dir))
    b = run(tiny_config(**base, pipeline__max_staleness=0, pipeline__max_staleness_bound=2, pipeline__threads_per_side=1,
                        pipeline__generator=generator), store=str(store_dir))
    ra, sa, _ = _record(store_dir, a)
    rb, sb, table = _record(store_dir, b)
    assert len(ra) == 3 * 32 and ra == rb
    assert sa == sb
    assert table["staleness"].to_list() == [0] * len(rb)
    assert (table["version_start"] == table["step"] - 1).all() and (table["segments"] == 1).all()


@pytest.mark.parametrize("partial", [False, True])
def test_eta_one_runs_ahead_and_records_its_staleness(store_dir, tiny_config, partial):
    from workbench.engine import run

    seen = []
    # a batch in up to 4 stages (until_correct, one rollout per prompt a stage, at a temperature where the
    # organism is often wrong): weights pushed while the generator is mid-batch meet a stage in progress
    # or about to start. With the default one-stage batch of ~3-token answers, the trainer's record and
    # checkpoint usually let the generator finish first, and no rollout was cut (measured: 0 or 1 in 4 steps)
    staged = dict(allocator__name="until_correct", allocator__params={"stage_size": 1, "n_max": 4},
                  sampling__temperature=2.0)
    rid = run(tiny_config(steps=4, eval__every=0, eval__at_start=False, pipeline__max_staleness=1,
                          pipeline__partial_rollouts=partial, **staged),
              store=str(store_dir), on_step=lambda s, m: seen.append(m))
    _, _, table = _record(store_dir, rid)
    stale = table["staleness"]
    assert stale.max() <= 1 and set(stale.to_list()) <= {0, 1}
    # the generator ran ahead: a batch started before the update it lagged (it starts the next batch as
    # soon as one is queued, while the trainer has yet to train on that one)
    assert stale.max() == 1 and max(m["rollout/staleness_max"] for m in seen) == 1
    spans = (table["version_end"] > table["version_start"]).to_list()
    assert spans == (table["segments"] > 1).to_list()
    if not partial:  # no partial rollouts: one version each
        assert not any(spans)
    # With partial rollouts, whether new weights reach the generator mid-batch in a real run depends on the
    # two sides' timing (on a loaded machine the generator often finishes first): the cut and its
    # continuation are tested deterministically below (test_partial_rollout_continues_...), here only that
    # every span the run recorded is consistent (its segments, at most one version).
    assert ((table["version_end"] - table["version_start"]) <= 1).all()
    for key in ("timing_s/generator_busy", "timing_s/trainer_idle", "rollout/staleness_max"):
        assert key in seen[-1], key


class _Feed:
    """New weights 'arrive' after the `after`-th decoding step of the first segment."""

    def __init__(self, after: int):
        self.calls, self.after, self.version = 0, after, 0

    def pending(self) -> bool:
        self.calls += 1
        return self.version == 0 and self.calls == self.after

    def refresh(self) -> int:
        self.version += 1
        return self.version


def test_partial_rollout_continues_with_its_tokens_and_a_reduced_budget(store_dir, tiny_config):
    """A stage cut by new weights after 3 tokens and continued: the first segment is the uninterrupted
    generation's prefix, the continuation asks for max_new_tokens - 3 more, the rows record 2 segments
    and the new version; with unchanged weights it is the uninterrupted generation up to rounding."""
    import numpy as np
    import torch

    from workbench.engine.batch import stage_seeds
    from workbench.engine.setup import build_setup
    from workbench.rollout.base import SamplingParams

    cfg = tiny_config(model__threads=1, sampling__max_new_tokens=12, sampling__temperature=2.0)
    s = build_setup(cfg, store_dir=store_dir, run_id="x")
    rows = [i for i in range(4) for _ in range(4)]
    prompts = [s.prompts.train_tok[i] for i in rows]
    seeds = stage_seeds(0, 1, 0, rows)
    sampling = SamplingParams(temperature=2.0, max_new_tokens=12)
    whole = s.backend.generate(prompts, sampling, seeds=seeds)
    asked: list[int] = []
    generate = s.backend.generate

    def spy(prompts, sampling, **kw):
        asked.append(sampling.max_new_tokens)
        return generate(prompts, sampling, **kw)

    s.backend.generate = spy
    shaped = s.shape.generate(s.model, s.backend, prompts, rows, sampling, seeds, 0, s.pad_id, feed=_Feed(after=3))
    got, version_end, segments = shaped.batch, shaped.version_end, shaped.segments
    assert asked == [12, 12 - 3]
    cut = segments == 2
    assert cut.any() and (version_end[cut] == 1).all() and (version_end[~cut] == 0).all()
    assert (whole.lengths[torch.as_tensor(~cut)] <= 3).all()  # rows not cut had finished by then
    assert torch.equal(got.tokens[:, :3], whole.tokens[:, :3])
    assert torch.equal(got.logprobs[:, :3], whole.logprobs[:, :3])
    assert (got.lengths <= 12).all() and int(got.lengths[torch.as_tensor(cut)].min()) > 3
    assert got.cut is None
    # the continuation re-reads its prefix instead of a cached one: same tokens, log-probs to rounding
    same = [bool(torch.equal(got.tokens[i], whole.tokens[i])) for i in np.flatnonzero(cut)]
    assert sum(same) >= 0.9 * len(same)
    for i in np.flatnonzero(cut):
        if torch.equal(got.tokens[i], whole.tokens[i]):
            n = int(whole.lengths[i])
            assert torch.allclose(got.logprobs[i, :n], whole.logprobs[i, :n], atol=1e-4)


def test_stop_and_resume_keep_the_queued_batches(store_dir, tiny_config):
    """A stop while the generator is ahead: the batches it made go into the checkpoint and are trained
    on after the resume, so every step is trained once, and the bound still holds."""
    from workbench.engine import resume, run
    from workbench.engine.checkpoint import checkpoint_dir, latest_checkpoint, load_checkpoint
    from workbench.store import open_store

    cfg = tiny_config(steps=5, eval__every=0, eval__at_start=False, pipeline__max_staleness=2)
    rid = run(cfg, store=str(store_dir), stop_after=2)
    saved = load_checkpoint(latest_checkpoint(checkpoint_dir(store_dir, rid)))
    assert [q[0] for q in saved["queued"]] == list(range(3, 3 + len(saved["queued"])))
    resume(str(store_dir), rid)
    with open_store(str(store_dir)) as st:
        assert st.run(rid)["status"] == "finished"
        assert st.run_steps(rid)["step"].to_list() == [1, 2, 3, 4, 5]
        allocs = st.allocations(rid)
    _, _, table = _record(store_dir, rid)
    assert table.height == 5 * 32 and table["staleness"].max() <= 2
    assert table.group_by(["step", "prompt_id", "idx"]).len()["len"].max() == 1
    assert (allocs["stats_version"] <= allocs["step"] - 1).all()


def test_a_killed_generator_process_stops_the_run_and_resume_finishes_it(store_dir, tiny_config):
    """kill -9 of the generator process mid-run: the trainer's next take raises one line naming the
    process (the run does not hang), the run is marked failed, and `resume` finishes it with every
    step trained once and the bound kept."""
    import multiprocessing
    import os
    import signal

    from workbench.engine import resume, run
    from workbench.errors import WorkbenchError
    from workbench.store import open_store

    def kill_generator(step, metrics):
        if step == 2:
            (child,) = [p for p in multiprocessing.active_children() if p.name == "rollout-generator"]
            os.kill(child.pid, signal.SIGKILL)

    cfg = tiny_config(steps=5, eval__every=0, eval__at_start=False, checkpoint__every=1, pipeline__max_staleness=1)
    with pytest.raises(WorkbenchError, match=r"rollout generator process \(pid \d+\) died"):
        run(cfg, store=str(store_dir), on_step=kill_generator)
    with open_store(str(store_dir)) as st:
        (rid,) = st.list_runs()["run_id"].to_list()
        assert st.run(rid)["status"] == "failed"
    resume(str(store_dir), rid)
    with open_store(str(store_dir)) as st:
        assert st.run(rid)["status"] == "finished"
        assert st.run_steps(rid)["step"].to_list() == [1, 2, 3, 4, 5]
    _, _, table = _record(store_dir, rid)
    assert table.height == 5 * 32 and table["staleness"].max() <= 1
    assert table.group_by(["step", "prompt_id", "idx"]).len()["len"].max() == 1
