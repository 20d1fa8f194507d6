"""Rollout workers as Ray actors on a real local Ray runtime (one per module): same rollouts as the
in-process backend with 1 or 2 workers, weights reach every worker, a killed worker is restarted and
its share regenerated, and an engine run with 2 workers equals the in-process run, worker by worker."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from workbench.rollout.base import SamplingParams
from workbench.rollout.hf import HFBackend
from f32 import assert_f32_close
from waiting import wait_until
from workbench.control.liveness import pid_alive

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

SAMPLE = SamplingParams(temperature=1.0, max_new_tokens=10)


@pytest.fixture(scope="module")
def ray_runtime():
    from workbench.rollout.ray_backend import start_local_ray

    start_local_ray(attempts=5, num_cpus=2, object_store_memory=256 * 2**20)
    yield
    ray.shutdown()


def _rows(prompts, n=4):
    rows = [p for p in prompts for _ in range(n)]
    return rows, [7000 + i // n for i in range(len(rows))]


def _backend(model, tokenizer, workers):
    from workbench.rollout.ray_backend import RayBackend, RayOptions

    return RayBackend(model, HFBackend(model, tokenizer), RayOptions(workers=workers, start_timeout_s=300))


def test_one_and_two_workers_equal_in_process(ray_runtime, model, tokenizer, prompts, model_factory):
    rows, seeds = _rows(prompts)
    want = HFBackend(model, tokenizer).generate(rows, SAMPLE, seeds=seeds)
    for workers in (1, 2):
        backend = _backend(model_factory(), tokenizer, workers)  # its own trainer model: updated below
        try:
            got = backend.generate(rows, SAMPLE, seeds=seeds)
            assert torch.equal(got.tokens, want.tokens) and torch.equal(got.lengths, want.lengths)
            assert_f32_close(got.logprobs, want.logprobs, terms=64)
            assert_f32_close(got.entropy, want.entropy, terms=64)
            assert set(got.workers) == {f"ray-{i}" for i in range(workers)}
            for g in range(len(prompts)):  # a prompt's rollouts stay on one worker
                assert len(set(got.workers[4 * g:4 * g + 4])) == 1
            m = backend.take_metrics()
            assert m["rollout/workers"] == workers
            assert sum(m[f"perf/worker/ray-{i}/rollouts"] for i in range(workers)) == len(rows)
            assert all(m[f"perf/worker/ray-{i}/rollouts_per_s"] > 0 for i in range(workers))
            # new weights reach every worker before its next generation
            other = model_factory(seed=3)
            backend.update_weights(other)
            assert backend.policy_version == 1
            again = backend.generate(rows, SAMPLE, seeds=seeds)
            assert torch.equal(again.tokens, HFBackend(other, tokenizer).generate(rows, SAMPLE, seeds=seeds).tokens)
            # calls without seeds (evaluation) run in the trainer's process on the trainer's model
            g = torch.Generator().manual_seed(1)
            ev = backend.generate(rows, SAMPLE, generator=g)
            assert ev.workers is None
        finally:
            backend.close()
    assert ray.is_initialized()  # a runtime the backend did not start is left running


def test_killed_worker_is_restarted_and_its_share_regenerated(ray_runtime, model, tokenizer, prompts, model_factory):
    rows, seeds = _rows(prompts)
    backend = _backend(model_factory(), tokenizer, 2)
    try:
        other = model_factory(seed=3)
        backend.update_weights(other)
        want = HFBackend(other, tokenizer).generate(rows, SAMPLE, seeds=seeds)
        backend.inject_fault(0)  # ray-0 kills its own process (as kill -9) inside its next call
        got = backend.generate(rows, SAMPLE, seeds=seeds)
        assert torch.equal(got.tokens, want.tokens)
        events = backend.take_events()
        assert [e["data"]["worker"] for e in events] == ["ray-0"] and "died while generating" in events[0]["message"]
        # kill -9 from outside while idle: Ray restarts it; it reloads the latest weights first
        pid = backend.worker_pids()["ray-1"]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not pid_alive(pid), 30, "the killed worker's process to end")
        got = backend.generate(rows, SAMPLE, seeds=seeds)
        assert torch.equal(got.tokens, want.tokens)
        events = backend.take_events()
        assert events and all(e["data"]["worker"] == "ray-1" for e in events)
        assert backend.worker_pids()["ray-1"] != pid
    finally:
        backend.close()


def _rollouts(store, run_id):
    return store.sql("SELECT step, stage, prompt_id, idx, token_ids, worker, logprob_sum FROM rollouts "
                     "WHERE run_id = ? ORDER BY step, stage, prompt_id, idx", [run_id])


def test_engine_run_with_two_workers_equals_in_process(ray_runtime, store_dir, tiny_config):
    from workbench.engine import run
    from workbench.store import open_store

    killed: list[int] = []

    def kill_a_worker(step, m):
        if step == 1:  # kill -9 one actor between steps: the next step names it, nothing is lost
            for pid in _actor_pids():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                break

    base = dict(steps=3, eval__every=0, checkpoint__every=0)
    with open_store(store_dir) as st:
        a = run(tiny_config(**base), store=st)
        b = run(tiny_config(**base, rollout__backend="ray", rollout__workers=2, rollout__start_timeout_s=300),
                store=st, on_step=kill_a_worker)
        ra, rb = _rollouts(st, a), _rollouts(st, b)
        assert ra.height == rb.height == 3 * 32
        assert ra["token_ids"].to_list() == rb["token_ids"].to_list()
        assert set(ra["worker"]) == {"local"} and set(rb["worker"]) == {"ray-0", "ray-1"}
        assert rb.select("step", "stage", "prompt_id", "idx").is_duplicated().sum() == 0
        assert st.evals(a)["correct"].to_list() == st.evals(b)["correct"].to_list()  # same held-out pass@1
        steps = st.run_steps(b)
        per_step = [_as_dict(m) for m in steps.sort("step")["metrics"].to_list()]
        # every step that updated the policy ships its weights (an update needs a group with signal: the draw)
        if any("train/loss" in m for m in per_step):
            assert any("timing_s/weight_sync" in m for m in per_step)
        for m in per_step:
            assert m["rollout/workers"] == 2
            assert m["perf/worker/ray-0/rollouts_per_s"] > 0 and m["perf/worker/ray-1/rollouts_per_s"] > 0
        assert killed
        ev = st.events(b)
        restarts = ev.filter(ev["kind"] == "worker_restart")
        assert restarts.height >= 1 and restarts["message"].str.contains("rollout worker ray-").all()
        lanes = _check_worker_lanes(st, b, "trainer")
    # the killed worker's lane shows it down, then back: a restart span and its reload of the weights
    (name,) = {_data(d)["worker"] for d in restarts["data"].to_list()}
    down = [m for m in lanes if m.get(f"lane/{name}/restart/s", 0) > 0]
    assert down, sorted(k for m in lanes for k in m if k.startswith(f"lane/{name}"))
    if "timing_s/weight_sync" in lanes[0]:  # step 1 updated the policy (the draw): the new worker reloads it
        assert down[0].get(f"lane/{name}/weight_sync/s", 0) > 0, sorted(k for m in lanes for k in m
                                                                         if k.startswith(f"lane/{name}"))


def _data(d) -> dict:
    """An event's `data` as read back (a JSON string or a dict)."""
    import json

    return json.loads(d) if isinstance(d, str) else d


def _check_worker_lanes(st, run_id: str, driver: str) -> list[dict]:
    """Each Ray worker's lanes (workbench/rollout/worker_lanes.py) against what the store holds, step by
    step: a worker's generate span inside the step's generate phase on `driver`'s lane (the trainer, or the
    pipeline's generator), its generate seconds those of its rollouts per second, the rows it did those
    the rollouts table names it for, and its phases summing to the same windows for every worker. The
    lanes stay out of run comparisons (benchmarks/chaos_compare.py). The steps' metrics, in step order."""
    from benchmarks.chaos_compare import _METRICS

    steps = st.run_steps(run_id).sort("step")
    per_step = [_as_dict(m) for m in steps["metrics"].to_list()]
    rows = st.sql("SELECT step, worker, count(*) AS n FROM rollouts WHERE run_id = ? GROUP BY ALL", [run_id])
    did = {(r["step"], r["worker"]): r["n"] for r in rows.to_dicts()}
    workers = ("ray-0", "ray-1")
    for step, m in zip(steps["step"].to_list(), per_step):
        start, end = m[f"lane/{driver}/generate/start"], m[f"lane/{driver}/generate/end"]
        totals = []
        for w in workers:
            n = did.get((step, w), 0)
            assert m.get(f"perf/worker/{w}/rollouts", 0) == n, (step, w)
            if n:
                assert start <= m[f"lane/{w}/generate/start"] <= m[f"lane/{w}/generate/end"] <= end, (step, w)
                assert m[f"lane/{w}/generate/s"] == pytest.approx(n / m[f"perf/worker/{w}/rollouts_per_s"], abs=1e-5)
                assert 0 < m[f"lane/{w}/generate/s"] <= end - start
            totals.append(sum(m.get(f"lane/{w}/{p}/s", 0.0) for p in ("generate", "weight_sync", "restart", "idle")))
        assert totals[0] == pytest.approx(totals[1], abs=1e-4), (step, totals)  # the same windows
        if driver == "trainer":  # the windows lie inside its generate and weight_sync phases
            phases = m["timing_s/generate"] + m.get("timing_s/weight_sync", 0.0)
            # the windows are wall-clock (time.time), the phases perf_counter: a slew's share of slack
            assert totals[0] <= phases + 1e-3 + 1e-3 * phases, (step, totals)
    assert sum(n for (_, w), n in did.items()) == sum(m[f"perf/worker/{w}/rollouts"] for m in per_step
                                                      for w in workers if f"perf/worker/{w}/rollouts" in m)
    kept = st.sql(f"SELECT {_METRICS} AS metrics FROM steps WHERE run_id = ?", [run_id])["metrics"].to_list()
    assert kept and not any(k.startswith("lane/") for m in kept for k in _as_dict(m))
    return per_step


def _actor_pids() -> list[int]:
    """Processes of this runtime's rollout actors (Ray titles them `ray::RolloutWorker...`)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if f.read().startswith(b"ray::RolloutWorker"):
                        pids.append(int(entry))
            except OSError:
                continue
    return sorted(pids)


def _as_dict(m) -> dict:
    """A `steps.metrics` MAP value as read back (a dict, or a list of key/value records)."""
    return m if isinstance(m, dict) else {d["key"]: d["value"] for d in m}


def test_two_workers_generate_ahead_of_the_trainer(ray_runtime, store_dir, tiny_config):  # noqa: F811
    """The pipeline with Ray workers: they keep generating while the trainer updates, from the weights
    the generator thread ships them; every step is trained once, within eta, and the workers close."""
    from workbench.engine import run
    from workbench.store import open_store

    cfg = tiny_config(steps=4, eval__every=0, checkpoint__every=0, rollout__backend="ray", rollout__workers=2,
                       rollout__start_timeout_s=300, pipeline__max_staleness=1)
    seen = []
    with open_store(store_dir) as st:
        rid = run(cfg, store=st, on_step=lambda s, m: seen.append(m))
        r = st.sql("SELECT step, staleness, worker FROM rollouts WHERE run_id = ?", [rid])
        assert st.run(rid)["status"] == "finished"
    assert r.height == 4 * 32 and set(r["worker"]) == {"ray-0", "ray-1"}
    assert r["staleness"].max() <= 1
    assert all(m["rollout/workers"] == 2 for m in seen if "rollout/workers" in m) and "rollout/workers" in seen[-1]
    with open_store(store_dir) as st:
        _check_worker_lanes(st, rid, "generator")  # the pipeline's generator thread drove the workers
    # the run's actors were closed with it (the runtime is the module's)
    wait_until(lambda: not _actor_pids(), 60, "the run's actors to close", every=0.5)


def test_a_guard_rollback_keeps_the_pipeline_on_the_ray_workers(ray_runtime, store_dir, tiny_config):
    """A Ray + pipeline run that a guard rolls back goes on generating on the same Ray workers: the
    producer made again after the rollback takes them through the backend contract, not a child process
    of its own (which would write its rows as "local")."""
    from workbench.engine import run
    from workbench.store import open_store

    cfg = tiny_config(steps=4, eval__every=0, eval__at_start=False, checkpoint__every=2, rollout__backend="ray",
                      rollout__workers=1, rollout__start_timeout_s=300, pipeline__max_staleness=1,
                      algorithm__kl_coef=0.05, algorithm__updates_per_step=2,  # lr 10: a real infinite loss
                      guards=[{"preset": "nan", "settings": {"lr": 5e-4}}])
    with open_store(store_dir) as st:
        def on_step(step, metrics):
            if step == 2 and not st.controls(st.list_runs()["run_id"][0]).height:  # once: applied at step 3
                st.add_control(st.list_runs()["run_id"][0], "set_lr", {"lr": 10.0}, who="test")

        rid = run(cfg, store=st, on_step=on_step)
        (alert,) = st.alerts(rid).to_dicts()
        assert (alert["guard"], alert["step"], alert["status"]) == ("nan", 3, "acted")
        assert "rolled back to step 2" in alert["outcome"]
        assert st.run(rid)["status"] == "finished" and st.run_steps(rid)["step"].to_list() == [1, 2, 3, 4]
        live = st.sql("SELECT step, worker, staleness FROM rollouts WHERE run_id = ?", [rid])
        old = st.sql("SELECT step, worker FROM rollouts WHERE run_id = ?", [f"{rid}.attempt1"])
    assert live.height == 4 * 32 and old["step"].unique().to_list() == [3]
    assert set(live["worker"]) == {"ray-0"} and set(old["worker"]) == {"ray-0"}  # never "local"
    assert live["staleness"].max() <= 1
    wait_until(lambda: not _actor_pids(), 60, "the run's actors to close", every=0.5)
