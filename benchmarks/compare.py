"""The real allocator comparison (`workbench bench allocators` without `--simulate`).

The default organism experiment (`configs/organism.toml`) runs once per allocator and seed, at the
same generated-token budget, and the held-out evaluations are compared against generated tokens.

How "the same budget" is set: `uniform` runs the experiment as configured (B prompts x n rollouts);
the median number of tokens its first seed generated per step becomes every other allocator's
per-step budget, in tokens (`allocator.budget_kind = "tokens"`). An allocator may spend less than
that (selective skipping does); it never spends more. `--tokens-per-step` sets the budget for every
allocator, `uniform` included.

What is reported, per allocator (means over seeds, at each evaluation step):
- `curve`: held-out pass@1 and pass@8 (temperature-1 samples, the unbiased estimator) against the
  cumulative generated tokens;
- `zero_signal_frac`: the share of groups whose rewards did not vary, over every step;
- `tokens_to_uniform_final`: the generated tokens it needed to reach uniform's final pass@1 — the
  first evaluation at or above it, interpolated linearly from the previous evaluation; null when it
  never got there;
- `token_saving_vs_uniform`: uniform's own `tokens_to_uniform_final` divided by the allocator's;
and `best_token_saving_vs_uniform`, the largest of those (null when no other allocator got there).

With `store` (`--keep-in`), a run already finished there with exactly the same config is reused
instead of run again, so an interrupted comparison picks up where it stopped, and one with more
allocators or seeds only runs what is new.

Workload profiles (`profile`, issue #17): "default", "skewed" or "long" (`PROFILE_RUNS` lists the
settings each adds to the experiment). Seeds may differ per allocator (`seeds_for`), and each row
carries bootstrap intervals over seeds (`benchmarks/intervals.py`): `saving_ci90`,
`saving_real`, `final_pass1_ci90`, `final_pass8_ci90`; the result carries `best_saving_ci90` and
`uniform_zero_signal_frac`.

`write_report` puts the JSON in `docs/bench/allocators-<profile>.json`, the curves in
`allocators-<profile>.png` and `.html`, and rebuilds `allocators.md` (every profile measured so far)
and the leverage map (`leverage.png`, `leverage.json`) from the profile files there.
"""

from __future__ import annotations

import json
import statistics
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from workbench.checks import check_int
from workbench.allocators.registry import get_allocator, shipped_allocators
from workbench.errors import ConfigError
from benchmarks.intervals import with_intervals

REFERENCE = "uniform"
PASS_K = (1, 8)
PROFILE_RUNS: dict[str, list[str]] = {
    "default": [],
    # 360 steps: over 120, uniform's held-out pass@1 rose 0.02, below seed noise (dev/LOG.md, 2026-12-01)
    "skewed": ["task.profile=skewed", "steps=360", "eval.every=30"],
    # 360 steps: over 120, uniform's held-out pass@1 rose ~0.02 (only "1+1" moved), below seed noise (dev/LOG.md)
    "long": ["task.profile=long", "sampling.max_new_tokens=24", "steps=360", "eval.every=30"],
}
"""What each workload profile sets in `configs/organism.toml` for the comparison (before `--set`)."""
DOCS_BENCH = Path(__file__).resolve().parents[1] / "docs" / "bench"


def compare(allocators: list[str] | None = None, seeds: int = 3, *, base: Any = None,
            overrides: list[str] | None = None, tokens_per_step: int | None = None,
            store: str | Path | None = None, progress: Callable[[str], None] | None = None,
            profile: str = "default", seeds_for: dict[str, int] | None = None,
            reference_last: bool = False) -> dict[str, Any]:
    """Run the comparison; returns the JSON object `workbench bench allocators --json` prints.

    `base` is the experiment (a RunConfig; default `configs/organism.toml` with the profile's
    settings, then `overrides`). Runs go to `store` when given (they stay there, to browse in the
    dashboard), else to a temporary store that shares the default store's organism cache. `seeds_for`
    gives some allocators another number of seeds than `seeds`. `reference_last` (only with
    `tokens_per_step`, which fixes the budget without uniform's first run) runs uniform's seeds after
    the others, so that another process can run uniform's seeds into the same store meanwhile."""
    names = list(dict.fromkeys(allocators or shipped_allocators()))
    for name in names:
        get_allocator(name)  # an unknown name lists the valid ones
    if profile not in PROFILE_RUNS:
        raise ConfigError(f"bench allocators: profile {profile!r}; allowed: {', '.join(PROFILE_RUNS)}")
    check_int("bench allocators", "seeds", seeds, 1, 100)
    seeds_for = dict(seeds_for or {})
    for name, n in seeds_for.items():
        get_allocator(name)
        check_int("bench allocators", f"seeds for {name}", n, 1, 100)
    if tokens_per_step is not None:
        check_int("bench allocators", "tokens_per_step", tokens_per_step, 1, 10**9)
    if reference_last and tokens_per_step is None:
        raise ConfigError("bench allocators: running uniform last needs --tokens-per-step (uniform's first run "
                          "sets the budget otherwise)")
    if REFERENCE not in names:
        names.insert(0, REFERENCE)
    names.sort(key=lambda n: n != REFERENCE)
    if base is None:
        from benchmarks.engine_bench import base_config

        overrides = PROFILE_RUNS[profile] + list(overrides or [])
        base = base_config(overrides)
    elif overrides:
        raise ConfigError("bench allocators: pass either a base config or overrides, not both")
    if base.eval.every <= 0:
        raise ConfigError("eval.every: the comparison needs evaluations during the run (an integer >= 1)")
    if base.eval.samples < max(PASS_K):
        raise ConfigError(f"eval.samples: the comparison reports pass@{max(PASS_K)}, so it needs >= {max(PASS_K)} "
                          f"samples per eval prompt (got {base.eval.samples})")
    say = progress or (lambda _msg: None)

    t0 = time.perf_counter()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    with _store(store, base) as root:
        order = names[1:] + names[:1] if reference_last else names
        for name in order:
            for seed in range(seeds_for.get(name, seeds)):
                cfg = _config(base, name, seed, tokens_per_step)
                say(f"{name} seed {seed}: {cfg.steps} steps, budget {cfg.allocator.budget} {cfg.allocator.budget_kind}")
                runs.setdefault(name, []).append(_one_run(cfg, root, say))
            if name == REFERENCE and tokens_per_step is None:
                tokens_per_step = max(1, int(round(statistics.median(runs[name][0]["tokens_per_step"]))))
    result = summarise(runs, tokens_per_step=tokens_per_step, seeds=seeds, steps=base.steps,
                       minutes=(time.perf_counter() - t0) / 60, runs_kept=store is not None,
                       overrides=list(overrides or []), profile=profile,
                       seeds_by_allocator={n: len(rs) for n, rs in runs.items()})
    return with_intervals(result, runs, REFERENCE)


def _config(base: Any, name: str, seed: int, tokens_per_step: int | None) -> Any:
    from workbench.config import RunConfig

    data = base.to_dict()
    data["seed"], data["name"] = seed, f"compare-{name}"
    if name != REFERENCE or tokens_per_step is not None:
        alloc = data["allocator"]
        alloc["name"] = name
        if name != base.allocator.name:
            alloc["params"] = {}
        if tokens_per_step is not None:
            alloc["budget_kind"], alloc["budget"] = "tokens", int(tokens_per_step)
    return RunConfig.from_dict(data)


@contextmanager
def _store(store: str | Path | None, base: Any) -> Iterator[Path]:
    """The runs' store: the given directory, or a temporary one sharing the default store's organism."""
    if store is not None:
        Path(store).mkdir(parents=True, exist_ok=True)
        yield Path(store)
        return
    from workbench.store import default_store_path
    from benchmarks.engine_bench import temp_store

    with temp_store(Path(default_store_path()), base) as root:
        yield root


def finished_run(cfg: Any, root: Path) -> tuple[str, float] | None:
    """A finished run in the store at `root` with exactly this config (an earlier, interrupted
    comparison kept there with `--keep-in`), and its minutes; None when there is none."""
    from workbench.store import open_store

    if not (root / "catalog.sqlite").is_file():
        return None
    want = json.dumps(cfg.to_dict(), sort_keys=True, default=str)
    with open_store(str(root)) as st:  # read-write: a store kept by an older workbench is migrated first
        runs = st.list_runs()
    for row in runs.filter(runs["status"] == "finished").sort("created_at").to_dicts():
        config = row["config"] if isinstance(row["config"], dict) else json.loads(row["config"] or "{}")
        if json.dumps(config, sort_keys=True, default=str) == want:
            return row["run_id"], (row["updated_at"] - row["created_at"]).total_seconds() / 60
    return None


def _one_run(cfg: Any, root: Path, say: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """One run (or the finished run of an interrupted comparison with this exact config); its
    evaluation curve against cumulative generated tokens, and its step figures."""
    from workbench.analysis.passk import with_pass_at_k
    from workbench.engine import run
    from workbench.store import open_store

    done = finished_run(cfg, root)
    if done is not None:
        run_id, minutes = done
        say(f"  reusing finished run {run_id} (same config)")
    else:
        t0 = time.perf_counter()
        run_id = run(cfg, store=str(root))
        minutes = (time.perf_counter() - t0) / 60
    with open_store(str(root)) as st:
        steps = st.run_steps(run_id)
        evals = st.evals(run_id)
    steps = steps.sort("step")
    cum = dict(zip([0] + steps["step"].to_list(), np.cumsum([0] + steps["tokens_generated"].to_list()).tolist()))
    scored = with_pass_at_k(evals, PASS_K)
    curve = []
    for step in sorted(scored["step"].unique().to_list()):
        at = scored.filter(scored["step"] == step)
        curve.append({"step": int(step), "tokens": int(cum.get(step, cum[max(cum)])),
                      **{f"pass{k}": float(at[f"pass@{k}"].mean()) for k in PASS_K}})
    return {"run_id": run_id, "seed": cfg.seed, "minutes": minutes, "curve": curve,
            "pass1_by_level": _pass1_by_level(evals),
            "tokens_per_step": steps["tokens_generated"].to_list(),
            "zero_signal_frac": float(steps["zero_signal_frac"].mean()) if steps.height else None}


def _pass1_by_level(evals: Any) -> dict[str, dict[str, float]]:
    """Held-out pass@1 per task level (1-based, as text) at the run's first and last evaluation."""
    if evals.height == 0:
        return {}
    steps = evals["step"].to_list()
    out = {}
    for key, step in (("start", min(steps)), ("end", max(steps))):
        at = evals.filter(evals["step"] == step)
        rate = (at["correct"] / at["samples"]).to_list()
        levels: dict[str, list[float]] = {}
        for level, r in zip(at["level"].to_list(), rate):
            levels.setdefault(str(level), []).append(r)
        out[key] = {lv: float(np.mean(rs)) for lv, rs in sorted(levels.items(), key=lambda kv: int(kv[0]))}
    return out


def _mean_by_level(rs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each run's `pass1_by_level` averaged over seeds (runs without it are left out)."""
    have = [r["pass1_by_level"] for r in rs if r.get("pass1_by_level")]
    if not have:
        return {}
    return {key: {lv: float(np.mean([h[key][lv] for h in have if lv in h[key]])) for lv in have[0][key]}
            for key in ("start", "end")}


def _mean_curve(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The seeds' curves averaged point by point (every run evaluates at the same steps)."""
    common = set.intersection(*({p["step"] for p in r["curve"]} for r in runs))
    out = []
    for step in sorted(common):
        pts = [next(p for p in r["curve"] if p["step"] == step) for r in runs]
        out.append({"step": step, **{key: float(np.mean([p[key] for p in pts]))
                                     for key in ("tokens", *(f"pass{k}" for k in PASS_K))}})
    return out


def tokens_to_reach(curve: list[dict[str, Any]], target: float) -> float | None:
    """Generated tokens at which `curve` first reaches pass@1 `target` (linear between evaluations)."""
    prev = None
    for p in curve:
        if p["pass1"] >= target:
            if prev is None or p["pass1"] == prev["pass1"]:
                return float(p["tokens"])
            frac = (target - prev["pass1"]) / (p["pass1"] - prev["pass1"])
            return float(prev["tokens"] + frac * (p["tokens"] - prev["tokens"]))
        prev = p
    return None


def summarise(runs: dict[str, list[dict[str, Any]]], **info: Any) -> dict[str, Any]:
    """The comparison's JSON object from each allocator's runs (the reference, uniform, included)."""
    curves = {name: _mean_curve(rs) for name, rs in runs.items()}
    target = curves[REFERENCE][-1]["pass1"]
    ref_tokens = tokens_to_reach(curves[REFERENCE], target)
    rows = []
    for name, rs in runs.items():
        reach = tokens_to_reach(curves[name], target)
        final = [r["curve"][-1] for r in rs]
        zs = [r["zero_signal_frac"] for r in rs if r["zero_signal_frac"] is not None]
        rows.append({
            "allocator": name,
            "final_pass1": float(np.mean([p["pass1"] for p in final])),
            "final_pass1_by_seed": [p["pass1"] for p in final],
            "final_pass8": float(np.mean([p["pass8"] for p in final])),
            "final_tokens": float(np.mean([p["tokens"] for p in final])),
            "zero_signal_frac": float(np.mean(zs)) if zs else None,
            "tokens_to_uniform_final": reach,
            "token_saving_vs_uniform": (ref_tokens / reach) if reach and ref_tokens else None,
            "minutes": float(np.mean([r["minutes"] for r in rs])),
            "pass1_by_level": _mean_by_level(rs),
            "curve": curves[name],
            "curves_by_seed": [r["curve"] for r in rs],
            "minutes_by_seed": [r["minutes"] for r in rs],
            "run_ids": [r["run_id"] for r in rs] if info.get("runs_kept") else [],
        })
    savings = [r["token_saving_vs_uniform"] for r in rows
               if r["allocator"] != REFERENCE and r["token_saving_vs_uniform"] is not None]
    ref_zs = [r["zero_signal_frac"] for r in runs[REFERENCE] if r["zero_signal_frac"] is not None]
    return {"uniform_final_pass1": target, "best_token_saving_vs_uniform": max(savings) if savings else None,
            "uniform_zero_signal_frac": float(np.mean(ref_zs)) if ref_zs else None,
            "best_allocator": next((r["allocator"] for r in rows if savings
                                    and r["token_saving_vs_uniform"] == max(savings)
                                    and r["allocator"] != REFERENCE), None),
            # every run's own minutes (a reused run's as recorded when it ran), beside `minutes`: this call's wall
            "run_minutes": float(sum(r["minutes"] for rs in runs.values() for r in rs)),
            **info, "allocators": rows}


def write_report(result: dict[str, Any], out_dir: str | Path = DOCS_BENCH) -> list[Path]:
    """allocators-<profile>.json, .html and .png under `out_dir`, then the overview of every profile
    there (allocators.md, leverage.png, leverage.json); returns the paths written."""
    from benchmarks.leverage import attach_prediction, write_overview

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"allocators-{result.get('profile', 'default')}"
    attach_prediction(result, out)
    paths = [out / f"{stem}.json", out / f"{stem}.html", out / f"{stem}.png"]
    paths[0].write_text(json.dumps(result, indent=2) + "\n")
    _plotly_figure(result).write_html(paths[1], include_plotlyjs="cdn")
    _png(result, paths[2])
    return paths + write_overview(out)


def format_value(v: Any, fmt: str) -> str:
    """`v` in `fmt`; None prints as "—" and a saving of 1e9 or more as "∞"."""
    # a bootstrap saving is capped at 1e9 where a resample's target is met at 0 tokens
    return "—" if v is None else "∞" if isinstance(v, float) and v >= 1e9 else format(v, fmt)


def _ci(v: Any, ci: Any, fmt: str) -> str:
    return format_value(v, fmt) + (f" [{format_value(ci[0], fmt)}, {format_value(ci[1], fmt)}]" if ci else "")


def markdown_table(result: dict[str, Any], heading: str = "# Allocators on the model organism") -> str:
    """One profile's comparison as markdown: what ran, the command, a row per allocator."""
    seeds = result.get("seeds_by_allocator") or {r["allocator"]: result["seeds"] for r in result["allocators"]}
    sets = result.get("overrides", [])
    profile = result.get("profile", "default")
    lines = [
        heading,
        "",
        f"{result['steps']} steps per run, {result['tokens_per_step']} generated tokens per step at most "
        f"({result.get('run_minutes', result['minutes']):.1f} minutes of runs in all). Uniform's final held-out "
        f"pass@1: {result['uniform_final_pass1']:.3f}; uniform's zero-signal group fraction: "
        f"{format_value(result.get('uniform_zero_signal_frac'), '.3f')}. " + _best_line(result),
        *_learning_line(result),
        f"Reproduce: `workbench bench allocators --json --profile {profile} --seeds {result['seeds']}"
        + "".join(f" --seeds-for {n}={k}" for n, k in seeds.items() if k != result["seeds"])
        + f" --allocators {','.join(r['allocator'] for r in result['allocators'])}"
        + "".join(f" --set {o}" for o in sets if o not in _profile_sets(profile))
        + " --keep-in store/bench-allocators` (see `docs/allocators.md`).",
        "",
        "Intervals are 90% bootstrap intervals over seeds; a saving is real (✓) when its interval excludes 1.0 "
        "and rests on the measured curves (✗ extrapolated: most resamples reached uniform's final value only on the "
        "line extended past the allocator's last evaluation).",
        "",
        "| allocator | seeds | final pass@1 | final pass@8 | final pass@1 − uniform's | generated tokens "
        "| zero-signal frac | tokens to uniform's final | saving | real | minutes per run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["allocators"]:
        real = ("" if r["allocator"] == REFERENCE or r.get("saving_ci90") is None
                else "✓" if r.get("saving_real") else "✗ extrapolated" if r.get("saving_extrapolated")
                and r["saving_ci90"][0] > 1.0 else "✗")
        lines.append(
            f"| `{r['allocator']}` | {seeds.get(r['allocator'], '—')} | {_ci(r['final_pass1'], r.get('final_pass1_ci90'), '.3f')} "
            f"| {_ci(r['final_pass8'], r.get('final_pass8_ci90'), '.3f')} "
            f"| {'' if r['allocator'] == REFERENCE else _ci(r.get('final_vs_uniform'), r.get('final_vs_uniform_ci90'), '+.3f')} "
            f"| {r['final_tokens']:.0f} "
            f"| {format_value(r['zero_signal_frac'], '.3f')} | {format_value(r['tokens_to_uniform_final'], '.0f')} "
            f"| {_ci(r['token_saving_vs_uniform'], r.get('saving_ci90'), '.2f')} | {real} | {r['minutes']:.1f} |")
    return "\n".join(lines) + "\n"


def _best_line(result: dict[str, Any]) -> str:
    saving = (f"{_ci(result['best_token_saving_vs_uniform'], result.get('best_saving_ci90'), '.2f')} "
              f"({result['best_allocator'] or 'none reached it'})")
    if result.get("uniform_learns") is False:
        saving = f"not meaningful here (uniform did not learn; the point estimate would be {saving})"
    ahead = result.get("best_final_vs_uniform")
    return (f"Best token saving vs uniform: {saving}. Furthest above uniform's final pass@1: "
            + (f"`{ahead['allocator']}`, {_ci(ahead['diff'], ahead['ci90'], '+.3f')}." if ahead
               else "no allocator's interval lies above it."))


def _learning_line(result: dict[str, Any]) -> list[str]:
    """Uniform's own held-out gain, and a warning when it did not rise out of seed noise."""
    if result.get("uniform_gain_ci90") is None:
        return []
    line = (f"Uniform's held-out pass@1 gain over the run: {_ci(result['uniform_gain_pass1'], result['uniform_gain_ci90'], '+.3f')}.")
    if not result.get("uniform_learns"):
        line += (" **Its interval includes 0: uniform did not learn out of seed noise here, so a saving measured "
                 "against its final value says nothing; compare the final pass@1 against uniform's, at the same "
                 "per-step budget, instead.**")
    return [line]


def _profile_sets(profile: str) -> list[str]:
    return PROFILE_RUNS.get(profile, [])


def _plotly_figure(result: dict[str, Any]) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("held-out pass@1", "held-out pass@8"))
    for i, r in enumerate(result["allocators"]):
        xs = [p["tokens"] for p in r["curve"]]
        for col, key in ((1, "pass1"), (2, "pass8")):
            fig.add_trace(go.Scatter(x=xs, y=[p[key] for p in r["curve"]], mode="lines+markers",
                                     name=r["allocator"], legendgroup=r["allocator"], showlegend=col == 1,
                                     line=dict(color=COLOURS[i % len(COLOURS)])), row=1, col=col)
    fig.update_xaxes(title_text="generated tokens")
    fig.update_layout(title=f"Allocators on the model organism, profile {result.get('profile', 'default')} "
                            "(mean over seeds)", height=450, width=1100)
    return fig


def _png(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, r in enumerate(result["allocators"]):
        xs = [p["tokens"] for p in r["curve"]]
        for ax, key in zip(axes, ("pass1", "pass8")):
            ax.plot(xs, [p[key] for p in r["curve"]], marker="o", ms=3, label=r["allocator"],
                    color=COLOURS[i % len(COLOURS)])
    for ax, title in zip(axes, ("held-out pass@1", "held-out pass@8")):
        ax.set_title(title)
        ax.set_xlabel("generated tokens")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Allocators on the model organism, profile {result.get('profile', 'default')} (mean over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#000000"]
