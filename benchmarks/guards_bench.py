"""`workbench bench guards`: scripted faults on the organism, each injected the way it happens in a real
run, never by faking a metric; does the guard set catch each, how late, what did it do, and do clean
runs (the default experiment and each workload profile) stay quiet?

    workbench bench guards --json                                # full size: default organism, 240 steps, 3 seeds
    workbench bench guards --steps 16 --seeds 3 --organism small --json   # the size run on 2 cores

Faults (F = half-way):
- `temperature`: a person's `set_temperature 5` command applied at step F; the bench's
  `entropy_blowup` guard rolls back with the run's temperature and learning rate.
- `lr_x100`: a person's `set_lr` to 100 times the run's rate, applied at step F, and a second one back
  to the run's rate `LR_FAULT_STEPS` steps later (`workbench ctl RUN lr VALUE`, then back).
- `reward_hacking`: the training reward is a user verifier that pays for short answers
  (`short_answers_pay`), while the held-out evaluation keeps the true verifier; from step 1. The run
  evaluates every `HACK_EVAL_EVERY` steps, as the preset asks (it reads the held-out score).
- `non_finite_loss`: a run with a KL penalty to its reference and two optimiser steps per batch (GRPO's
  k3 estimator, PPO epochs) whose learning rate a `set_lr` command sets far too high at step F: the
  first optimiser step moves the policy so far that the second one's exp(ref - logp) overflows, the
  loss is infinite and the gradient NaN, as in the NaN reports the `nan` preset cites.

A rollback counts as recovered when the run finishes with a held-out pass@1 at or above the low end of
the 90% prediction interval of one clean run of the default experiment (from its clean seeds; the
fault runs are seed 0, so a rollback that undoes its fault exactly ends on the clean seed 0's figure).

Prints `faults`, `detected`, `max_detection_delay_steps`, `false_alarms`, `recovered`, with per-fault
and per-run details. A fault counts as detected when an alert's first step is at or after the fault;
its delay is the alert's step minus the fault's, and it is within "window + 1" when that is at most one
step more than the earliest a guard of that window could fire (`SEEN_AFTER`: a learning rate shows one
step after its command is applied).
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from workbench.config import RunConfig
from benchmarks.intervals import prediction_interval
from workbench.guards.watch import metrics_map

def guards(lr: float) -> list[dict[str, Any]]:
    """The bench's guard set on top of the defaults (the same for clean and faulty runs): entropy
    blow-up and reward collapse roll back with the run's own temperature and learning rate (`lr`), so
    a learning-rate fault is not carried on from a checkpoint that holds it; `reward_hacking` alerts."""
    back = {"action": "rollback", "settings": {"temperature": 1.0, "lr": lr}}
    return [{"preset": "entropy_blowup", **back}, {"preset": "reward_collapse", **back},
            {"preset": "reward_hacking"}]


VERIFIER = "benchmarks.guards_bench:short_answers_pay"
FAULTS = ("temperature", "lr_x100", "reward_hacking", "non_finite_loss")
PROFILES = ("default", "skewed", "long")
"""Workload profiles whose clean runs count false alarms (`task.profile`)."""
PROFILE_OVER: dict[str, dict[str, Any]] = {"default": {}, "skewed": {}, "long": {"sampling": {"max_new_tokens": 24}}}
"""What each profile's runs change beyond the task (as `benchmarks.compare.PROFILE_RUNS`: the
long profile's worked answers need 24 new tokens)."""
HACK_EVAL_EVERY = 4
"""The reward-hacking run's evaluation cadence (the other runs': an eighth of the run)."""
LR_FAULT_STEPS = 3
"""Steps the learning rate stays at 100 times the run's."""
NONFINITE_LR = 10.0
"""The learning rate of the `non_finite_loss` fault (10^5 times the default experiment's)."""
KL_TWO_EPOCHS = {"kl_coef": 0.05, "updates_per_step": 2}
"""The `non_finite_loss` run's algorithm: a KL penalty (k3) and two optimiser steps per batch."""


def short_answers_pay(response: str, reference: str, prompt: Any = None) -> float:
    """A hacked reward: training responses of at most 2 characters are paid; the held-out evaluation
    (prompts of split "eval") keeps the exact-match verifier."""
    from workbench.tasks.verifiers import verify_exact

    if prompt is not None and getattr(prompt, "split", "train") == "eval":
        return float(verify_exact(response, reference).reward)
    return 1.0 if len(response.strip()) <= 2 else 0.0


def _task(organism: str, verifier: str = "exact", profile: str = "default") -> dict[str, Any]:
    """The task section: the organism's own (the small recipe's levels, or a profile's)."""
    task: dict[str, Any] = {"kind": "arithmetic"}
    if organism == "small":
        from workbench.models.organism import small_recipe

        task = dict(small_recipe().to_dict()["task"], kind="arithmetic")
    if profile != "default":  # the profile's own levels and pool (and an organism warm-started on them)
        task = {k: v for k, v in task.items() if k not in ("levels", "train_size")}
    return dict(task, verifier=verifier, profile=profile)


def _config(steps: int, seed: int, organism: str, **over: Any) -> RunConfig:
    data: dict[str, Any] = {
        "name": f"guards-bench-{over.pop('label', 'clean')}", "seed": seed, "steps": steps,
        "checkpoint": {"every": max(2, steps // 8), "keep": 8},
        "eval": {"every": max(2, steps // 8)}, **over,
    }
    if organism == "small":
        from workbench.models.organism import small_recipe

        task = data.setdefault("task", _task(organism))
        recipe = small_recipe().to_dict()
        if task.get("profile", "default") != "default":  # warm-started on the profile's task, as the default organism is
            recipe["task"] = dict(task, verifier="exact")
        data.setdefault("model", {"organism": recipe})
        data.setdefault("allocator", {"budget": 128, "prompts_per_step": 32, "params": {"n": 4}})
    lr = RunConfig.from_dict(data).optim.lr
    return RunConfig.from_dict(dict(data, guards=guards(lr)))


def _one(store: Any, cfg: RunConfig, commands: dict[int, list[tuple[str, dict]]] | None = None
         ) -> dict[str, Any]:
    """One run; `commands[k]` are a person's commands issued once after step k (applied at step k + 1)."""
    from workbench.engine import run

    holder: dict[str, Any] = {"issued": set()}

    def on_step(step: int, metrics: dict[str, Any]) -> None:
        for i, (command, args) in enumerate((commands or {}).get(step, [])):
            if (step, i) not in holder["issued"]:  # once: a rollback does not make the person repeat it
                holder["issued"].add((step, i))
                store.add_control(holder["run_id"], command, args, who="bench")

    original = store.create_run

    def create_run(*a: Any, **k: Any) -> str:
        holder["run_id"] = original(*a, **k)
        return holder["run_id"]

    store.create_run = create_run
    t0 = time.perf_counter()
    try:
        run_id = run(cfg, store=store, on_step=on_step)
    except Exception as exc:  # noqa: BLE001 - a run the guards did not save is a result, not a bench error
        if "run_id" not in holder:
            raise
        run_id = holder["run_id"]
        holder["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        store.create_run = original
    return run_record(store, run_id, seconds=round(time.perf_counter() - t0, 1), error=holder.get("error"))


def run_record(store: Any, run_id: str, *, seconds: float | None = None, error: str | None = None) -> dict[str, Any]:
    """What the bench keeps of one run: its final held-out pass@1, status, attempts and alerts."""
    alerts = store.alerts(run_id).sort("step").to_dicts()
    evals = store.run_steps(run_id).tail(1)["metrics"].to_list()
    final = metrics_map(evals[0] if evals else None).get("eval/pass1")
    return {"run_id": run_id, "seconds": seconds, "final_pass1": final,
            "attempts": store.attempts(run_id).height, "status": store.run(run_id)["status"], "error": error,
            "alerts": [{k: a[k] for k in ("guard", "first_step", "step", "action", "status", "outcome")}
                       for a in alerts]}


SEEN_AFTER = {"temperature": 0, "lr_x100": 1, "reward_hacking": 0, "non_finite_loss": 0}
"""Steps from the fault to the first step whose metrics can show it: a temperature is sampled with at
once, and a non-finite loss is that step's own; a learning rate first changes the weights at the end of
its step, so only the next step's rollouts come from them."""


def _fault(name: str, out: dict[str, Any], fault_step: int, clean_interval: list[float] | None) -> dict[str, Any]:
    from workbench.guards.presets import PRESETS

    after = [a for a in out["alerts"] if a["first_step"] >= fault_step]
    first = after[0] if after else None
    delay = (first["step"] - fault_step) if first else None
    window = PRESETS[first["guard"]].window if first and first["guard"] in PRESETS else None
    earliest = SEEN_AFTER[name] + (window or 1) - 1  # the rule holds from the first step that can show it
    rec = {"fault": name, "fault_step": fault_step, "detected": first is not None, "guard": first and first["guard"],
           "delay_steps": delay, "window": window, "earliest_delay_steps": earliest,
           "within_window_plus_1": delay is not None and window is not None and delay <= earliest + 1,
           "action": first and first["action"], "outcome": first and first["outcome"],
           "false_alarms_before_fault": len([a for a in out["alerts"] if a["first_step"] < fault_step]),
           "final_pass1": out["final_pass1"], "status": out["status"], "error": out["error"],
           "run_id": out["run_id"]}
    if first and first["action"] == "rollback":
        lo_hi = clean_interval or [None, None]
        rec["clean_pass1_interval"] = lo_hi
        rec["recovered"] = (out["final_pass1"] is not None and lo_hi[0] is not None
                            and out["final_pass1"] >= lo_hi[0] and out["status"] == "finished")
    return rec


def _fault_runs(store: Any, store_path: str, steps: int, organism: str,
                faults: tuple[str, ...] = FAULTS) -> dict[str, tuple[int, dict[str, Any]]]:
    """Each fault's run: (its fault step, the run's record)."""
    f = max(3, steps // 2)
    lr = _config(steps, 0, organism).optim.lr
    plans: dict[str, tuple[int, dict[str, Any], dict[int, list[tuple[str, dict]]]]] = {
        "temperature": (f, {}, {f - 1: [("set_temperature", {"temperature": 5.0})]}),
        "lr_x100": (f, {}, {f - 1: [("set_lr", {"lr": 100 * lr})],
                            f - 1 + LR_FAULT_STEPS: [("set_lr", {"lr": lr})]}),
        "reward_hacking": (1, {"task": _task(organism, VERIFIER),
                               "eval": {"every": min(HACK_EVAL_EVERY, max(2, steps // 8))}}, {}),
        "non_finite_loss": (f, {"algorithm": KL_TWO_EPOCHS}, {f - 1: [("set_lr", {"lr": NONFINITE_LR})]}),
    }
    return {name: (fs, _one(store, _config(steps, 0, organism, label=name, **over), cmds))
            for name, (fs, over, cmds) in plans.items() if name in faults}


def run_bench(store_path: str | Path | None = None, *, steps: int | None = None, seeds: int = 3,
              organism: str = "default", profiles: tuple[str, ...] = PROFILES,
              faults: tuple[str, ...] = FAULTS) -> dict[str, Any]:
    """Run the clean seeds of each profile and the faults; the summary and the details (see the module
    docstring). ConfigError on an unknown profile or fault."""
    from workbench.errors import ConfigError

    for name, given, known in (("profile", profiles, PROFILES), ("fault", faults, FAULTS)):
        if set(given) - set(known):
            raise ConfigError(f"bench guards: --{name}: {sorted(set(given) - set(known))[0]!r} is not allowed "
                              f"(one of {', '.join(known)})")
    steps = steps or 240
    tmp = None
    if store_path is None:
        tmp = tempfile.TemporaryDirectory(prefix="guards-bench-")
        store_path = tmp.name
    try:
        from workbench.store import open_store

        with open_store(str(store_path)) as store:
            clean = {p: [_one(store, _config(steps, seed, organism, label=f"clean-{p}",
                                                              task=_task(organism, profile=p), **PROFILE_OVER[p]))
                         for seed in range(seeds)] for p in profiles}
            runs = _fault_runs(store, str(store_path), steps, organism, faults)
    finally:
        if tmp is not None:
            tmp.cleanup()
    return summarise(clean, runs, steps=steps, seeds=seeds, organism=organism)


def summarise(clean: dict[str, list[dict[str, Any]]], runs: dict[str, tuple[int, dict[str, Any]]], *,
              steps: int, seeds: int, organism: str) -> dict[str, Any]:
    """The bench's figures from the clean runs by profile and the fault runs (fault step, run record)."""
    profiles = list(clean)
    finals = [c["final_pass1"] for c in clean.get("default", []) if c["final_pass1"] is not None]
    # a fault run is one run: it is judged against where one clean run lands, not the clean mean's interval
    interval = prediction_interval(finals) if len(finals) >= 2 else ([finals[0], finals[0]] if finals else None)
    faults = [_fault(name, out, fs, interval) for name, (fs, out) in runs.items()]
    delays = [f["delay_steps"] for f in faults if f["delay_steps"] is not None]
    rollbacks = [f for f in faults if "recovered" in f]
    return {
        "faults": len(faults), "detected": sum(f["detected"] for f in faults),
        "within_window_plus_1": sum(f["within_window_plus_1"] for f in faults),
        "max_detection_delay_steps": max(delays) if delays else None,
        "false_alarms": sum(len(c["alerts"]) for runs_ in clean.values() for c in runs_),
        "false_alarms_by_profile": {p: sum(len(c["alerts"]) for c in runs_) for p, runs_ in clean.items()},
        "false_alarms_by_guard": dict(Counter(a["guard"] for runs_ in clean.values() for c in runs_
                                              for a in c["alerts"])),
        "recovered": sum(bool(f["recovered"]) for f in rollbacks), "rollbacks": len(rollbacks),
        "steps": steps, "clean_seeds": seeds, "profiles": profiles, "organism": organism,
        "clean_final_pass1_interval": interval, "clean_final_pass1": finals,
        "details": {"faults": faults, "clean": clean},
    }
