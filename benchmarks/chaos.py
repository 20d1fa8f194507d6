"""`workbench bench chaos`: kill a run with SIGKILL at random moments, resume it after each kill, and
compare everything it stored with an uninterrupted run of the same config and seed.

What runs (all engine work in real subprocesses, each its own process and session like `workbench run`;
by default forked from a zygote that imported torch and the engine once, `benchmarks/zygote.py`,
so that each of the many short processes does not spend seconds importing: `fork=False` starts each as a
fresh Python instead):

1. A shortened default experiment (`chaos_overrides`: the organism, uniform groups, 24 steps, a
   checkpoint every 3, an evaluation every 5), run in three *segments*: the run stops cleanly after
   step 8 and step 16 (a checkpoint, status `stopped`), control commands are queued while it is
   stopped (budget and temperature before step 9; allocator parameters and eval interval before
   step 17), and it is resumed. Queuing while stopped makes the step each command applies at part of
   the experiment (the first step after the stop), not of timing, so both runs apply them at the
   same step.
2. The reference run: those segments, nothing killed.
3. The chaos run: the same segments, killed `kills` times. Each kill is a (point, count) pair drawn
   with the seed: the process is started with `WORKBENCH_FAULT=point:count` and kills itself the
   count-th time it reaches that point (`workbench/faults.py`: generation, the update, inside the
   store commit, between writing a checkpoint and renaming it, evaluation, applying a control
   command), or a plain timer kill of the process group after a random delay. After each kill the
   run is resumed (`workbench.engine.resume`: last checkpoint, store rolled back to it, controls
   applied since then applied again at their steps) until the segment ends. A kill whose point is
   not reached before the segment ends is carried to the next segment.
4. The comparison, row by row with the store's own SQL (`compare_runs`): steps (deterministic
   columns), rollouts, allocations, prompt_stats, evals and the controls' outcomes, plus the final
   checkpoints' weights.

Target: every kill resumed, 0 steps lost, 0 steps duplicated, 0 rows mismatched, `final_equal` true.

The asynchronous mode (`eta` > 0: `pipeline.max_staleness = eta`, a generator process running ahead):
which policy version made a batch depends on how the two sides' timings fall, so two runs of one seed
need not store the same rollouts, and the row-by-row comparison does not apply. What must hold instead
(`async_checks`): every step trained exactly once, every step's rollouts stored exactly once (the
reference's count per step, no (step, stage, prompt, index) twice: the batches the generator had made
ahead travel in the checkpoint and none is trained twice after a resume), no consumed rollout more
than eta versions stale and no allocation on statistics newer than its step allows (the bound holds
after every resume), the controls applied at the same steps, and the run finished.
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError
from benchmarks.chaos_compare import async_checks, compare_runs
from benchmarks.zygote import Zygote
from workbench.faults import ENV, POINTS

KINDS = (*(p for p in POINTS if p != "tool"), "timer")
"""Kinds of kill: each kill point the chaos run passes (not `tool`: its run has no episodes; that point
has its own test, tests/engine/test_episodes_run.py), and a plain SIGKILL after a random delay."""

TIMER_SHARE = 0.9
"""A timer kill lands within this share of the shortest reference process's lifetime."""

ZYGOTE_ENTRY = ("import workbench.engine; from benchmarks.chaos import segment_cli; "
                "from benchmarks.zygote import zygote; zygote(segment_cli)")
"""The program of the zygote that forks the engine processes (`segment_cli` in each child)."""


def chaos_overrides(steps: int = 24, organism: str = "small") -> dict[str, Any]:
    """The shortened default experiment: the default config's algorithm and allocator (uniform
    groups of 8, DAPO defaults) on the organism, with 16 prompts per step, a checkpoint every 3
    steps and an evaluation every 5 (and before the first step). `organism`: "small" (the test
    recipe, built in seconds) or "default" (the default experiment's, built in minutes once)."""
    from workbench.models.organism import OrganismRecipe, small_recipe

    recipe = (small_recipe() if organism == "small" else OrganismRecipe()).to_dict()
    return {
        "name": "chaos",
        "seed": 0,
        "steps": steps,
        "model.organism": recipe,
        "model.threads": 1,
        "task": {"kind": "arithmetic", **recipe["task"]},
        "allocator.prompts_per_step": 16,
        "allocator.budget": 128,
        "allocator.params": {"n": 8},
        "eval.every": 5,
        "eval.samples": 4,
        "eval.max_prompts": 24,
        "checkpoint.every": 3,
        "checkpoint.keep": 2,
        "logging.heartbeat_s": 1.0,
    }


def segments(steps: int) -> list[int]:
    """The last step of each segment: the run stops cleanly after each but the last."""
    a, b = max(1, steps // 3), max(2, 2 * steps // 3)
    return sorted({a, b, steps})


def controls_before(segment: int) -> list[tuple[str, dict[str, Any]]]:
    """The commands queued while the run is stopped before `segment` (0-based)."""
    return {
        1: [("set_budget", {"kind": "rollouts", "amount": 96}), ("set_temperature", {"temperature": 0.9})],
        2: [("set_allocator_params", {"params": {"n": 6}}), ("set_eval_interval", {"every": 4})],
    }.get(segment, [])


def schedule(kills: int, seed: int) -> list[tuple[str, float]]:
    """`kills` (kind, u) pairs: kinds spread evenly, order and u in (0, 1] drawn from `seed`. When the
    kill is armed, u picks the moment: the ceil(u * n)-th of the n times the point will be reached
    before the segment ends (`reachable`), or u times a process's lifetime for a timer kill."""
    rng = random.Random(seed)
    order = list(KINDS)
    rng.shuffle(order)  # which kinds come once more than others (or at all, for fewer kills than kinds)
    kinds = [order[i % len(order)] for i in range(kills)]
    rng.shuffle(kinds)
    return [(k, round(1.0 - rng.random(), 3)) for k in kinds]


def reachable(store: Path, run_id: str, cfg: Any, end: int, segment: int) -> dict[str, int]:
    """How many times a process resumed now will surely reach each point before step `end`: it
    restarts after the last checkpoint C, so it generates (less the eta + 1 batches an
    asynchronous run's checkpoint may hold), updates and commits for each of the steps C+1..end (commits counted at half: group commit may put two steps in one), writes the checkpoints
    and evaluations due in them, and applies the pending commands and those applied after C."""
    from workbench.engine.checkpoint import checkpoint_dir, latest_checkpoint
    from workbench.store import open_store

    ckpt = latest_checkpoint(checkpoint_dir(store, run_id))
    last = int(ckpt.stem.split("-")[1]) if ckpt else 0
    steps = range(last + 1, end + 1)
    every = 4 if segment >= 2 else cfg.eval.every  # see controls_before(2)
    with open_store(store) as st:
        rows = st.controls(run_id).to_dicts()
    controls = sum(1 for r in rows if r["status"] == "pending"
                   or (r["status"] == "applied" and (r["applied_step"] or 0) > last))
    # an asynchronous run's checkpoint may hold up to eta + 1 batches its generator made ahead
    ahead = cfg.pipeline.max_staleness + 1 if cfg.pipeline.max_staleness else 0
    return {
        "generate": max(0, len(steps) - ahead),
        "update": len(steps),
        "commit": max(1, len(steps) // 2),
        "checkpoint": sum(1 for s in steps if s % cfg.checkpoint.every == 0 or s == end),
        "eval": sum(1 for s in steps if s % every == 0 or s == cfg.steps) + (last == 0 and cfg.eval.at_start),
        "control": controls,
    }


# -- one engine process ----------------------------------------------------------------------------

def _child_env(fault: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["PYTHONUNBUFFERED"] = "1"
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    if fault:
        env[ENV] = fault
    return env


def run_segment(store: Path, run_id: str, until: int | None, *, config: Path | None, log: Path,
                fault: str | None = None, timer_s: float | None = None, timeout_s: float = 600.0,
                zyg: Zygote | None = None) -> dict[str, Any]:
    """Run (config given) or resume `run_id` in a fresh process until step `until` (None: the end);
    with `fault` armed in it, or killed after `timer_s`. Returns {"rc", "killed", "wall_s"}. `zyg`:
    fork the process from this zygote (its output goes to `log`'s folder, one .out/.err per process)."""
    args = ["segment", str(store), run_id, "--until", str(until or 0)] + (["--config", str(config)] if config else [])
    t0 = time.monotonic()
    with open(log, "ab") as out:
        out.write(f"# {time.strftime('%H:%M:%S')} {fault or ''} {timer_s or ''} until {until}\n".encode())
    if zyg is not None:
        n = sum(1 for _ in log.parent.glob("process-*.out"))
        rc, timed_out = zyg.run(args, log.parent / f"process-{n:02d}.out", log.parent / f"process-{n:02d}.err",
                                timer_s or timeout_s, env={ENV: fault})
    else:
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "benchmarks.chaos", *args],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=_child_env(fault))
            timed_out = False
            try:
                rc = proc.wait(timeout=timer_s or timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc, timed_out = proc.wait(), True
    if timed_out and not timer_s:
        raise WorkbenchError(f"bench chaos: run {run_id} did not finish its segment within "
                             f"{timeout_s:.0f} s (log: {log})")
    return {"rc": rc, "killed": rc == -signal.SIGKILL, "wall_s": time.monotonic() - t0}


def _segment_main(store: str, run_id: str, until: int, config: str | None) -> None:
    """The engine process of one segment (what `workbench run --run-id` / `workbench resume` do,
    plus a clean stop after step `until`)."""
    from workbench.config import load_config
    from workbench.engine import resume, run

    stop_after = until or None
    if config:
        run(load_config(config), store=store, run_id=run_id, stop_after=stop_after)
        return
    from workbench.engine.checkpoint import checkpoint_dir, latest_checkpoint

    last = latest_checkpoint(checkpoint_dir(store, run_id))
    if stop_after and last is not None and int(last.stem.split("-")[1]) >= stop_after:
        # killed after the segment's last checkpoint, before its status: the segment is done
        from workbench.store import open_store

        with open_store(store) as st:
            st.set_run_status(run_id, "stopped")
        return
    resume(store, run_id, stop_after=stop_after)


# -- driving a run through its segments --------------------------------------------------------------

def _queue_controls(store: Path, run_id: str, segment: int) -> None:
    from workbench.control import api
    from workbench.store import open_store

    with open_store(store) as st:
        for command, args in controls_before(segment):
            api.issue(st, run_id, command, args, who="bench-chaos")


def _new_run(store: Path, cfg: Any, name: str) -> tuple[str, Path]:
    from workbench.config_docs import to_toml
    from workbench.store import open_store

    with open_store(store) as st:
        run_id = st.create_run(name, cfg.to_dict(), cfg.seed, status="created")
    rdir = store / "runs" / run_id
    rdir.mkdir(parents=True, exist_ok=True)
    (rdir / "config.toml").write_text(to_toml(cfg))
    return run_id, rdir


def _status(store: Path, run_id: str) -> str:
    from workbench.store import open_store

    with open_store(store) as st:
        return str(st.run(run_id)["status"])


def drive(store: Path, cfg: Any, name: str, kills: list[tuple[str, float]], *,
          timeout_s: float = 600.0, lifetime_s: float = 10.0, zyg: Zygote | None = None) -> dict[str, Any]:
    """Run `cfg` through its segments as new run `name`, with the given kills; what happened (each
    engine process forked from `zyg` when given)."""
    run_id, rdir = _new_run(store, cfg, name)
    log = rdir / "run.log"
    ends = segments(cfg.steps)
    pending = list(kills)
    allowed = [len(kills) * (i + 1) // len(ends) for i in range(len(ends))]  # kills by the end of each
    fired: list[dict[str, Any]] = []
    starts = 0
    walls: list[float] = []
    config: Path | None = rdir / "config.toml"
    t0 = time.monotonic()
    for i, end in enumerate(ends):
        if i and controls_before(i):
            _queue_controls(store, run_id, i)
            first = next((j for j, k in enumerate(pending) if k[0] == "control"), None)
            if first is not None:  # kill while the queued commands are being applied
                pending.insert(0, pending.pop(first))
        while True:
            kill = fault = timer = None
            if pending and (len(fired) < allowed[i] or end == ends[-1]):
                can = reachable(store, run_id, cfg, end, i)
                kill = next((k for k in pending if k[0] == "timer" or can[k[0]] > 0), None)
                if kill and kill[0] == "timer":
                    timer = round(kill[1] * TIMER_SHARE * lifetime_s, 2)
                elif kill:
                    fault = f"{kill[0]}:{max(1, math.ceil(kill[1] * can[kill[0]]))}"
            out = run_segment(store, run_id, end if end < cfg.steps else None, config=config, log=log,
                              fault=fault, timer_s=timer, timeout_s=timeout_s, zyg=zyg)
            starts += 1
            walls.append(round(out["wall_s"], 1))
            config = None  # from now on the run exists: resume it
            if out["rc"] == 0 or (out["killed"] and fault):  # this process got past restoring the run
                for k in fired:
                    k["resumed"] = True if k["resumed"] is None else k["resumed"]
            if out["killed"]:
                if kill is not None:
                    pending.remove(kill)
                fired.append({"kind": kill[0] if kill else "unplanned", "at": fault or timer,
                              "segment": i + 1, "after_s": round(out["wall_s"], 1), "resumed": None})
                continue
            if out["rc"] != 0:
                raise WorkbenchError(f"bench chaos: run {run_id} exited with status {out['rc']} (log: {log})")
            break
        want = "stopped" if end < cfg.steps else "finished"
        got = _status(store, run_id)
        if got != want:
            raise WorkbenchError(f"bench chaos: run {run_id} is {got} after segment {i + 1}, not {want} "
                                 f"(log: {log})")
    resumed = sum(bool(k["resumed"]) for k in fired)
    return {"run_id": run_id, "kills": fired, "resumed": resumed, "processes": starts, "process_s": walls,
            "not_fired": pending, "wall_s": round(time.monotonic() - t0, 1)}


# -- the bench -------------------------------------------------------------------------------------

def bench_chaos(kills: int = 20, *, seed: int = 0, steps: int = 24, organism: str = "small",
                store_dir: Path | str | None = None, models: Path | str | None = None,
                timeout_s: float = 600.0, eta: int = 0, fork: bool = True) -> dict[str, Any]:
    """Run the reference and the chaos run in one store (a temporary one unless `store_dir`), compare.

    `models`: a directory holding built organisms (`<dir>/organism-<hash>/`) to link into the store
    instead of building one (tests share one build). `eta` > 0: the asynchronous mode (module docstring).
    `fork`: the engine processes are forked from a zygote (module docstring), else each a fresh Python."""
    import shutil

    if eta < 0:
        raise WorkbenchError(f"bench chaos: --eta must be >= 0, got {eta}")
    if kills < 0:
        raise WorkbenchError(f"bench chaos: --kills must be >= 0, got {kills}")
    if steps < 3:
        raise WorkbenchError(f"bench chaos: --steps must be >= 3, got {steps}")
    tmp = None
    if store_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="workbench-chaos-"))
        store_dir = tmp / "store"
    store = Path(store_dir).absolute()
    try:
        return _bench(store, kills, seed, steps, organism, models, timeout_s, eta, fork)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def code_digest() -> str:
    """SHA-256 of the package's source files: the engine processes of both runs must run the same
    code (an edit to the checkout during the bench would show as a mismatch that is not a bug)."""
    import hashlib

    import workbench

    root = Path(workbench.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _bench(store: Path, kills: int, seed: int, steps: int, organism: str, models: Path | str | None,
           timeout_s: float, eta: int = 0, fork: bool = True) -> dict[str, Any]:
    from workbench.control.launch import resolve_config
    from workbench.models.sources import run_model_dir
    from workbench.store import open_store

    store.mkdir(parents=True, exist_ok=True)
    if models is not None and not (store / "models").exists():
        (store / "models").symlink_to(Path(models).absolute())
    over = chaos_overrides(steps, organism)
    if eta:
        over["pipeline.max_staleness"] = eta
    cfg = resolve_config(None, over)
    open_store(store).close()
    t0 = time.monotonic()
    run_model_dir(cfg, store)  # build the organism once, before anything is timed or killed
    build_s = time.monotonic() - t0
    digest = code_digest()
    zyg = Zygote(_child_env(None), store, entry=ZYGOTE_ENTRY) if fork else None
    try:
        if zyg is not None:
            zyg.wait_ready()
        ref = drive(store, cfg, "chaos-reference", [], timeout_s=timeout_s, zyg=zyg)
        chaos = drive(store, cfg, "chaos-killed", schedule(kills, seed), timeout_s=timeout_s,
                      lifetime_s=min(ref["process_s"]), zyg=zyg)
    finally:
        if zyg is not None:
            zyg.close()
    code_changed = code_digest() != digest
    by_kind: dict[str, int] = {}
    for k in chaos["kills"]:
        by_kind[k["kind"]] = by_kind.get(k["kind"], 0) + 1
    if eta:
        return {"eta": eta, "kills": len(chaos["kills"]), "resumed": chaos["resumed"],
                **async_checks(store, chaos["run_id"], ref["run_id"], eta), "code_changed": code_changed,
                "kills_by_point": by_kind, "kills_planned": kills, "kills_not_reached": len(chaos["not_fired"]),
                "steps": steps, "segments": segments(steps), "processes": chaos["processes"],
                "kill_log": chaos["kills"], "reference_s": ref["wall_s"], "chaos_s": chaos["wall_s"],
                "organism_build_s": round(build_s, 1), "seed": seed, "forked": fork,
                "run_ids": {"reference": ref["run_id"], "chaos": chaos["run_id"]}}
    cmp = compare_runs(store, chaos["run_id"], ref["run_id"])
    return {
        "kills": len(chaos["kills"]),
        "resumed": chaos["resumed"],
        "steps_lost": cmp["steps_lost"],
        "steps_duplicated": cmp["steps_duplicated"],
        "rows_mismatched": cmp["rows_mismatched"],
        "final_equal": cmp["final_equal"],
        "code_changed": code_changed,
        "kills_by_point": by_kind,
        "kills_planned": kills,
        "kills_not_reached": len(chaos["not_fired"]),
        "controls_equal": cmp["controls_equal"],
        "controls": cmp["controls"],
        "weights_equal": cmp["weights_equal"],
        "steps": steps,
        "segments": segments(steps),
        "processes": chaos["processes"],
        "kill_log": chaos["kills"],
        "reference_s": ref["wall_s"],
        "chaos_s": chaos["wall_s"],
        "organism_build_s": round(build_s, 1),
        "seed": seed,
        "forked": fork,
        "run_ids": {"reference": ref["run_id"], "chaos": chaos["run_id"]},
    }


def segment_cli() -> None:
    """One engine process of `workbench bench chaos` from its command line (`sys.argv`): `python -m
    benchmarks.chaos segment STORE RUN_ID [--until N] [--config FILE]`, or a zygote's child.
    Its kill points are armed from `WORKBENCH_FAULT` here (a forked child's environment is set after
    the zygote imported `workbench.faults`)."""
    import argparse

    from workbench import faults

    parser = argparse.ArgumentParser(description="one engine process of `workbench bench chaos`")
    parser.add_argument("role", choices=["segment"])
    parser.add_argument("store")
    parser.add_argument("run_id")
    parser.add_argument("--until", type=int, default=0)
    parser.add_argument("--config")
    a = parser.parse_args(sys.argv[1:])
    faults.arm(os.environ.get(ENV))
    _segment_main(a.store, a.run_id, a.until, a.config)


if __name__ == "__main__":
    segment_cli()
