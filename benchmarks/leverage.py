"""Workload profiles and the leverage map: when does allocation pay, and can the simulator tell in advance?

    workbench allocators profile skewed      # build the profile's organism, measure, predict (minutes)

`profile_report(profile)` builds the profile's organism (its warm start), samples 16 answers per
held-out prompt at temperature 1, and records the pass-rate histogram, the pass rate per level, the
mean response length and the zero-signal fraction uniform should see at the start (the chance that
8 rollouts of a prompt all agree, estimated without bias from the 16 samples: (C(c,8) + C(16-c,8)) /
C(16,8) with c correct). It then runs the offline simulator (`workbench.allocators.simulate`) on a
population drawn from those measured pass rates, with the real comparison's prompts per step, group
size, steps, per-step token budget and pool size, and records each allocator's predicted token
saving. All of it goes to `docs/bench/profile-<profile>.json` and the histogram to `profile-<profile>.png`.

`write_overview(out_dir)` reads every `profile-*.json` (predictions) and `allocators-*.json` (measured
comparisons) there and writes `allocators.md` (every profile), `leverage.json` and `leverage.png`:
each allocator's measured saving (with its 90% interval) against the workload's zero-signal fraction,
beside the simulator's prediction for the same profile, with the bound of a pure skipper,
1 / (1 - zero-signal fraction): an allocator that only removed the zero-signal groups, and learned as
much from each informative group as uniform does, saves at most that much.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

PROFILES = ("default", "skewed", "long")
GROUP = 8
"""Group size of uniform in the comparison (the zero-signal estimate uses it)."""
WITHIN = 0.25
"""The issue's target: a prediction within 25% of the measured saving."""


def zero_signal_chance(correct: int, samples: int, n: int = GROUP) -> float:
    """Unbiased estimate, from `correct` of `samples`, that n rollouts of the prompt all agree."""
    if samples < n:
        raise ValueError(f"need at least {n} samples, got {samples}")
    return (math.comb(correct, n) + math.comb(samples - correct, n)) / math.comb(samples, n)


def _run_settings(profile: str) -> Any:
    from benchmarks.compare import PROFILE_RUNS
    from benchmarks.engine_bench import base_config

    return base_config(list(PROFILE_RUNS[profile]))


def profile_report(profile: str, store_dir: str | Path, *, samples: int = 16, sim_seeds: int = 3,
                   allocators: list[str] | None = None) -> dict[str, Any]:
    """Build, measure and predict one workload profile (see the module docstring)."""
    from workbench.allocators.registry import shipped_allocators
    from workbench.allocators.simulate import SimConfig, predict_savings
    from workbench.models.organism import read_meta, warm_start_pass_rates
    from workbench.models.sources import organism_recipe, run_model_dir
    from workbench.tasks.arithmetic import ArithmeticTask

    cfg = _run_settings(profile)
    plain = cfg.to_dict()
    recipe = organism_recipe(plain["model"], plain["task"])
    t0 = time.perf_counter()
    path = run_model_dir(cfg, store_dir)  # the run's organism (its recipe above), built when missing
    meta = read_meta(path)
    rows = warm_start_pass_rates(path, recipe, samples=samples)
    task = ArithmeticTask(recipe.task)
    rates = [r["correct"] / samples for r in rows]
    levels: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        levels.setdefault(r["spec"], []).append(r)
    tokens = sum(r["mean_len"] for r in rows) / len(rows) + 1  # + <eos>
    group = int(cfg.allocator.params.get("n", GROUP))
    sim = SimConfig(population=len(task.train_prompts()), prompts_per_step=cfg.allocator.prompts_per_step,
                    group_size=group, budget_factor=1.0, budget_kind="tokens",
                    tokens_per_rollout=max(1, round(tokens)), steps=cfg.steps, initial_pass=tuple(rates))
    pred = predict_savings(allocators or shipped_allocators(), sim, seeds=sim_seeds)
    return {
        "profile": profile,
        "organism_hash": meta["hash"],
        "build_s": meta["build_s"], "build_cpu_s": meta["build_cpu_s"],
        "levels": list(recipe.task.levels),
        "untaught_levels": list(recipe.untaught_levels),
        "level_corrupt": [recipe.corrupt_share(i) for i in range(1, len(recipe.task.levels) + 1)],
        "train_prompts": sim.population,
        "samples_per_prompt": samples,
        "eval_prompts": len(rows),
        "pass_rate_histogram": [sum(r["correct"] == c for r in rows) for c in range(samples + 1)],
        "pass1": sum(rates) / len(rates),
        "pass1_by_level": {spec: sum(r["correct"] for r in rs) / (samples * len(rs)) for spec, rs in levels.items()},
        "frac_all_or_nothing": sum(r in (0.0, 1.0) for r in rates) / len(rates),
        "warm_start_zero_signal_frac": sum(zero_signal_chance(r["correct"], samples, group) for r in rows) / len(rows),
        "mean_response_tokens": tokens,
        "mean_response_tokens_by_level": {spec: sum(r["mean_len"] for r in rs) / len(rs) + 1
                                          for spec, rs in levels.items()},
        "run_settings": {"steps": cfg.steps, "prompts_per_step": cfg.allocator.prompts_per_step, "group": group,
                         "max_new_tokens": cfg.sampling.max_new_tokens},
        "simulator": {"seeds": sim_seeds, "config": {k: v for k, v in vars(sim).items() if k != "initial_pass"},
                      **pred},
        "seconds": time.perf_counter() - t0,
    }


def write_profile(report: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """profile-<p>.json and the histogram profile-<p>.png; then the overview."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    p = report["profile"]
    paths = [out / f"profile-{p}.json", out / f"profile-{p}.png"]
    paths[0].write_text(json.dumps(report, indent=2) + "\n")
    _histogram_png(report, paths[1])
    return paths + write_overview(out)


def _histogram_png(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = report["samples_per_prompt"]
    hist = report["pass_rate_histogram"]
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ax.bar([c / n for c in range(n + 1)], hist, width=0.8 / n, color="#1f77b4")
    ax.set_xlabel(f"pass rate at the warm start ({n} samples per held-out prompt, T = 1)")
    ax.set_ylabel("prompts")
    ax.set_title(f"profile {report['profile']}: pass@1 {report['pass1']:.2f}, expected zero-signal "
                 f"fraction {report['warm_start_zero_signal_frac']:.2f}", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _load(out: Path) -> tuple[dict[str, dict], dict[str, dict]]:
    """(predictions by profile, measured comparisons by profile) found under `out`."""
    preds = {p: json.loads((out / f"profile-{p}.json").read_text()) for p in PROFILES
             if (out / f"profile-{p}.json").is_file()}
    measured = {p: json.loads((out / f"allocators-{p}.json").read_text()) for p in PROFILES
                if (out / f"allocators-{p}.json").is_file()}
    legacy = out / "allocators.json"  # a default comparison from before profiles (no per-seed curves), if one is there
    if "default" not in measured and legacy.is_file():
        measured["default"] = {**json.loads(legacy.read_text()), "profile": "default", "legacy": True}
        ref = next((r for r in measured["default"]["allocators"] if r["allocator"] == "uniform"), {})
        measured["default"].setdefault("uniform_zero_signal_frac", ref.get("zero_signal_frac"))
    return preds, measured


def attach_prediction(result: dict[str, Any], out_dir: str | Path) -> dict[str, Any]:
    """Add to a comparison `result` the simulator's prediction for its profile (from
    profile-<p>.json under `out_dir`, when there) and a `leverage` row per allocator."""
    pred_file = Path(out_dir) / f"profile-{result.get('profile', 'default')}.json"
    pred = json.loads(pred_file.read_text())["simulator"] if pred_file.is_file() else None
    result["simulator"] = pred
    result["leverage"] = _leverage_rows(result, pred)
    return result


def _leverage_rows(result: dict[str, Any] | None, pred: dict[str, Any] | None) -> list[dict[str, Any]]:
    # a reference that did not learn out of seed noise gives savings that mean nothing: not judged
    judged = (result or {}).get("uniform_learns", True)
    names = [r["allocator"] for r in (result or {}).get("allocators", [])]
    names += [n for n in ((pred or {}).get("allocators") or {}) if n not in names]
    rows = []
    for name in names:
        if name == "uniform":
            continue
        m = next((r for r in (result or {}).get("allocators", []) if r["allocator"] == name), None)
        p = ((pred or {}).get("allocators") or {}).get(name)
        measured = m.get("token_saving_vs_uniform") if m else None
        predicted = p.get("predicted_saving") if p else None
        rows.append({
            "allocator": name, "measured_saving": measured, "measured_ci90": m.get("saving_ci90") if m else None,
            "measured_real": m.get("saving_real") if m else None,
            "seeds": len(m.get("curves_by_seed", [])) or (result or {}).get("seeds", 0) if m else 0,
            "predicted_saving": predicted,
            "prediction_error": (predicted / measured - 1) if (measured and predicted) else None,
            "prediction_within_25pct": (abs(predicted / measured - 1) <= WITHIN) if (measured and predicted) else None,
            "verdict": _verdict(measured, predicted) if (m and p and judged) else None,
            "prediction_in_ci90": _inside(predicted, m.get("saving_ci90")) if (m and p and judged) else None,
        })
    return rows


def _verdict(measured: float | None, predicted: float | None) -> str:
    """How the simulator's prediction compares with the measurement, both sides present; a saving of
    None means the allocator never reached uniform's final pass@1 within the run.

    "within 25%", "off by more than 25%", "both never" (the simulator said it would not get there, and
    it did not), "predicted never" (it did), "measured never" (the simulator said it would)."""
    if measured is None and predicted is None:
        return "both never"
    if measured is None:
        return "measured never"
    if predicted is None:
        return "predicted never"
    return "within 25%" if abs(predicted / measured - 1) <= WITHIN else "off by more than 25%"


def _inside(predicted: float | None, ci: list[float] | None) -> bool | None:
    """Whether the prediction lies inside the measured saving's 90% interval (a prediction of never
    counts as 0, the interval's value for resamples that never get there); None without an interval."""
    if not ci:
        return None
    return ci[0] <= (predicted or 0.0) <= ci[1]


AGREE = ("within 25%", "both never")
"""Verdicts counted as the simulator telling in advance."""


def agreement(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per profile: how many allocators' predictions agree with the measurement (within 25%, or both
    never reaching uniform's final value), of those with both sides."""
    judged = [r for r in rows if r.get("verdict")]
    return {"judged": len(judged), "agree": sum(r["verdict"] in AGREE for r in judged),
            "disagree": sorted(r["allocator"] for r in judged if r["verdict"] not in AGREE),
            "inside_measured_ci90": sum(bool(r.get("prediction_in_ci90")) for r in judged)}


def write_overview(out_dir: str | Path) -> list[Path]:
    """allocators.md (every measured profile), leverage.json and leverage.png from the files in `out_dir`."""
    from benchmarks.compare import markdown_table

    out = Path(out_dir)
    preds, measured = _load(out)
    lev = {"profiles": {}}
    for p in PROFILES:
        if p not in preds and p not in measured:
            continue
        pr, me = preds.get(p), measured.get(p)
        sim = (pr or {}).get("simulator")
        lev["profiles"][p] = {
            "uniform_zero_signal_frac": (me or {}).get("uniform_zero_signal_frac"),
            "warm_start_zero_signal_frac": (pr or {}).get("warm_start_zero_signal_frac"),
            "predicted_uniform_zero_signal_frac": (sim or {}).get("uniform_zero_signal_frac"),
            "skip_bound": _bound((me or {}).get("uniform_zero_signal_frac") or (sim or {}).get("uniform_zero_signal_frac")),
            "best_allocator": (me or {}).get("best_allocator"),
            "best_token_saving_vs_uniform": (me or {}).get("best_token_saving_vs_uniform"),
            "best_saving_ci90": (me or {}).get("best_saving_ci90"),
            "uniform_learns": (me or {}).get("uniform_learns"),
            "uniform_gain_ci90": (me or {}).get("uniform_gain_ci90"),
            "allocators": _leverage_rows(me, sim),
        }
        lev["profiles"][p]["simulator_agreement"] = agreement(lev["profiles"][p]["allocators"])
    paths = [out / "allocators.md", out / "leverage.json", out / "leverage.png"]
    parts = ["# Allocators on the model organism, by workload profile", "",
             "Written by `workbench bench allocators --profile P` and `workbench allocators profile P` "
             "(see `docs/allocators.md`, \"Workload profiles\" and \"The real comparison\"). The leverage map, "
             "`leverage.png` (numbers in `leverage.json`), sets each measured saving beside the simulator's "
             "prediction.", ""]
    for p in PROFILES:
        if p in measured:
            parts.append(markdown_table(measured[p], heading=f"## Profile `{p}`"))
            parts += _prediction_table(p, lev["profiles"][p])
            parts += _level_table(measured[p], (preds.get(p) or {}).get("levels"))
            if measured[p].get("legacy"):
                parts += ["These runs (2026-11-30, `allocators.json`) predate the intervals: their per-seed curves were not "
                          "kept, so the table has no intervals. The command above reruns them with intervals.", ""]
        else:
            run_it = (f"the comparison: `workbench bench allocators --json --profile {p} --seeds 3 --seeds-for "
                      "uniform=5 --allocators uniform,value_tracker,selective,dynamic_sampling,knapsack,uncertainty "
                      "--keep-in store/bench-allocators`.")
            if p in preds:
                parts += [f"## Profile `{p}`", "", "No real run yet; the warm start's histogram and the simulator's "
                          f"prediction are in `profile-{p}.json` (`workbench allocators profile {p}`) and "
                          f"`leverage.json`. Next, {run_it}", ""]
            else:
                parts += [f"## Profile `{p}`", "", f"Not measured yet. Warm start and prediction: `workbench "
                          f"allocators profile {p}`; {run_it}", ""]
    paths[0].write_text("\n".join(parts))
    paths[1].write_text(json.dumps(lev, indent=2) + "\n")
    _leverage_png(lev, paths[2])
    return paths


def _fmt(x: float | None) -> str:
    return "never" if x is None else f"{x:.2f}x"


def _ci(ci: list[float] | None) -> str:
    from benchmarks.compare import format_value  # its number format: an open end prints as ∞

    return "—" if not ci else f"[{format_value(ci[0], '.2f')}, {format_value(ci[1], '.2f')}]"


def _yes(b: bool | None) -> str:
    return "—" if b is None else ("yes" if b else "no")


def _prediction_table(p: str, row: dict[str, Any]) -> list[str]:
    """The simulator's prediction beside the measurement, for one profile (markdown lines)."""
    judged = [r for r in row["allocators"] if r["verdict"]]
    if row.get("uniform_learns") is False:
        return [f"The simulator is not judged on this profile: uniform did not learn out of seed noise, so there is "
                f"no measured saving to hold its prediction against (`profile-{p}.json` has the prediction).", ""]
    if not judged:
        return [f"No simulator prediction for this profile yet (`workbench allocators profile {p}`).", ""]
    a = row["simulator_agreement"]
    out = [f"The simulator against the measurement (`profile-{p}.json`, same steps and budget): it agrees for "
           f"{a['agree']} of {a['judged']} allocators (within 25%, or both never reaching uniform's final pass@1)"
           + (f"; not for {', '.join(f'`{n}`' for n in a['disagree'])}." if a["disagree"] else ".")
           + f" The prediction lies inside the measured saving's 90% interval for {a['inside_measured_ci90']} of "
           f"{a['judged']}.", "",
           "| allocator | measured saving | 90% interval | predicted | verdict | inside the interval |",
           "|---|---|---|---|---|---|"]
    out += [f"| `{r['allocator']}` | {_fmt(r['measured_saving'])} | {_ci(r['measured_ci90'])} | "
            f"{_fmt(r['predicted_saving'])} | {r['verdict']} | {_yes(r['prediction_in_ci90'])} |" for r in judged]
    return out + [""]


def _level_table(result: dict[str, Any], names: list[str] | None) -> list[str]:
    """Held-out pass@1 by task level, at the warm start and at each allocator's end (markdown lines):
    where the gain the savings are measured on comes from."""
    rows = [r for r in result.get("allocators", []) if r.get("pass1_by_level")]
    if not rows:
        return []
    levels = list(rows[0]["pass1_by_level"]["start"])
    label = {lv: (f"{names[int(lv) - 1]}" if names and int(lv) <= len(names) else f"level {lv}") for lv in levels}
    start = rows[0]["pass1_by_level"]["start"]
    out = ["Held-out pass@1 by level (mean over seeds), at the first evaluation and at each allocator's last: where "
           "the gain the savings are measured on comes from.", "",
           "| | " + " | ".join(f"`{label[lv]}`" for lv in levels) + " |", "|---" * (len(levels) + 1) + "|",
           "| warm start | " + " | ".join(f"{start[lv]:.3f}" for lv in levels) + " |"]
    out += [f"| `{r['allocator']}` | " + " | ".join(f"{r['pass1_by_level']['end'].get(lv, float('nan')):.3f}"
                                                    for lv in levels) + " |" for r in rows]
    return out + [""]


def _bound(zs: float | None) -> float | None:
    return None if zs is None or zs >= 1 else 1.0 / (1.0 - zs)


Y_MAX = 4.0
"""The map's ceiling: savings and interval ends above it are drawn at it."""
NEVER_Y = 0.55
"""Where the map puts an allocator that never reached uniform's final pass@1 within the run."""


def _leverage_png(lev: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from benchmarks.compare import COLOURS

    fig, ax = plt.subplots(figsize=(8.5, 5.5))
    xs = np.linspace(0.0, 0.85, 100)
    ax.plot(xs, 1 / (1 - xs), color="#999999", ls="--", lw=1)
    ax.axhline(1.0, color="#444444", lw=0.8)
    ax.axhline(NEVER_Y, color="#bbbbbb", lw=0.8, ls=":")
    ax.annotate("never reached uniform's final pass@1 within the run", (0.01, NEVER_Y), xytext=(0, 3),
                textcoords="offset points", fontsize=7, color="#666666")
    names = sorted({r["allocator"] for p in lev["profiles"].values() for r in p["allocators"]})
    colour = {n: COLOURS[i % len(COLOURS)] for i, n in enumerate(names)}
    # a small sideways offset per allocator, so that points of one profile do not hide each other
    shift = {n: (i - (len(names) - 1) / 2) * 0.006 for i, n in enumerate(names)}
    top = 2.0
    placed: list[float] = []
    for p, row in lev["profiles"].items():
        x_meas = row["uniform_zero_signal_frac"]
        x_pred = row["predicted_uniform_zero_signal_frac"]
        learns = row.get("uniform_learns") is not False
        for r in row["allocators"]:
            name = r["allocator"]
            c, dx = colour[name], shift[name]
            if r["seeds"] and x_meas is not None and learns:  # savings against a flat uniform mean nothing
                y = r["measured_saving"]
                if y is None:
                    ax.plot([x_meas + dx], [NEVER_Y], marker="v", color=c, ms=7, ls="none")
                else:
                    # an interval's low end of 0 means some resamples never got there: draw it down to that line
                    ci = r["measured_ci90"] or [y, y]
                    hi = min(ci[1], Y_MAX)  # an open-ended interval is drawn to the top
                    err = [[max(0.0, y - max(ci[0], NEVER_Y))], [max(0.0, hi - y)]]
                    ax.errorbar([x_meas + dx], [min(y, Y_MAX)], yerr=err, fmt="o", color=c, ms=6, capsize=3)
                    top = max(top, min(y, Y_MAX), hi)
            if r["verdict"] is not None or (not r["seeds"] and x_pred is not None):
                y = r["predicted_saving"]
                ax.plot([x_pred + dx], [NEVER_Y if y is None else y], marker="v" if y is None else "o", mfc="none",
                        color=c, ms=8, ls="none")
                top = max(top, y or 0)
        x = x_meas if x_meas is not None else x_pred
        if x is not None:
            # profiles whose x are close get their labels on separate lines
            level = sum(1 for x0 in placed if abs(x0 - x) < 0.1)
            placed.append(x)
            text = p + ("" if learns else ": uniform did not learn, no saving shown")
            ax.annotate(text, (x, 0.42 - 0.09 * level), ha="center", fontsize=8 if learns else 7,
                        fontweight="bold" if learns else "normal")
    ax.set_ylim(0.15, top * 1.08)
    ax.set_xlabel("uniform's zero-signal group fraction z (measured: filled; simulator: hollow)")
    ax.set_ylabel("token saving vs uniform (90% bootstrap interval)")
    ax.set_title("Leverage map: measured saving (filled) and the simulator's prediction (hollow), one x per profile;"
                 "\n▼: never reached uniform's final held-out pass@1", fontsize=9)
    ax.set_xlim(0, 0.9)
    ax.grid(alpha=0.3)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="#999999", ls="--", lw=1, label="skip-only bound 1 / (1 − z)"),
               Line2D([], [], color="#444444", marker="o", ls="none", label="measured (90% interval)"),
               Line2D([], [], color="#444444", marker="o", mfc="none", ls="none", label="simulator's prediction"),
               Line2D([], [], color="#444444", marker="v", ls="none", label="never reached")]
    handles += [Line2D([], [], color=colour[n], marker="s", ls="none", label=n) for n in names]
    ax.legend(handles=handles, fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
