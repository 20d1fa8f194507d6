"""Pure frame manipulation for the pages: Polars in, Polars (or plain values) out. No Streamlit and
no store access, so each helper is unit-tested on hand-made frames. Where a reader the store does
not have would do the work in the database, the Polars version lives here (see docs/dashboard.md).
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

import polars as pl

from workbench.analysis.terms import metrics_long
from workbench.correctness import correct_expr, is_correct
from workbench.metrics import CATALOGUE, lookup


def _ks(max_samples: int) -> list[int]:
    """k values worth plotting for `max_samples` samples per prompt: 1, 2, 4, ... up to it."""
    ks, k = [], 1
    while k <= max_samples:
        ks.append(k)
        k *= 2
    return ks


def passk_by_step(evals: pl.DataFrame, ks: list[int] | None = None, *, n_boot: int = 200) -> pl.DataFrame:
    """Held-out pass@k per evaluated step: the unbiased estimator per prompt averaged over prompts,
    with a bootstrap interval over prompts (`workbench.analysis.pass_at_k_curve`). Columns step, k,
    pass_at_k, ci_low, ci_high, prompts."""
    from workbench.analysis import pass_at_k_curve

    schema = {"step": pl.Int64, "k": pl.Int64, "pass_at_k": pl.Float64, "ci_low": pl.Float64,
              "ci_high": pl.Float64, "prompts": pl.Int64}
    if evals.is_empty():
        return pl.DataFrame(schema=schema)
    ks = ks or _ks(int(evals["samples"].max()))
    out = pass_at_k_curve(evals.with_columns(pl.col("step").cast(pl.Int64)), ks, by=("step",), n_boot=n_boot)
    return out.select(list(schema)).cast(schema)


def window_start(steps: pl.DataFrame, max_rollouts: int) -> int:
    """The first step of the latest steps that together hold at most `max_rollouts` rollouts (at
    least the last step)."""
    s = steps.sort("step", descending=True)
    total = s["rollouts"].fill_null(0).cum_sum()
    inside = s.filter(total <= max_rollouts)
    return int(inside["step"].min()) if not inside.is_empty() else int(s["step"][0])


def step_quantiles(frame: pl.DataFrame, column: str, qs: tuple[float, ...] = (0.1, 0.5, 0.9)) -> pl.DataFrame:
    """Per step, quantiles of `column` (long format: step, q = "p10", value)."""
    schema = {"step": pl.Int64, "q": pl.Utf8, "value": pl.Float64}
    if frame.is_empty():
        return pl.DataFrame(schema=schema)
    wide = frame.group_by("step").agg(
        [pl.col(column).quantile(q, "linear").alias(f"p{round(q * 100)}") for q in qs])
    return wide.unpivot(index="step", variable_name="q", value_name="value").cast(schema).sort(["step", "q"])


def regime_changes(steps: pl.DataFrame) -> list[dict]:
    """Steps where the budget or the allocator (or its parameters) in force changed, each with a
    short label for the curves: [{"step": s, "label": "budget 256 rollouts"}, ...]."""
    need = {"step", "budget", "allocator"}
    if steps.is_empty() or not need <= set(steps.columns):
        return []
    cols = [c for c in ("budget", "budget_kind", "allocator", "allocator_params") if c in steps.columns]
    frame = steps.select("step", *cols).sort("step").with_columns(  # only the rows where something changed
        [pl.col(c).shift(1).alias(f"prev_{c}") for c in cols])
    differs = [pl.col(c).ne_missing(pl.col(f"prev_{c}")) for c in cols]
    changed = frame.with_row_index("_i").filter((pl.col("_i") > 0) & pl.any_horizontal(differs))
    out = []
    for row in changed.iter_rows(named=True):
        parts = []
        if row["budget"] != row["prev_budget"] or row.get("budget_kind") != row.get("prev_budget_kind"):
            parts.append(f"budget {row['budget']} {row.get('budget_kind') or ''}".strip())
        if row["allocator"] != row["prev_allocator"]:
            parts.append(f"allocator {row['allocator']}")
        elif row.get("allocator_params") != row.get("prev_allocator_params"):
            parts.append(f"{row['allocator']} params")
        out.append({"step": row["step"], "label": " · ".join(parts)})
    return out


OWN_SOURCE = "workbench"
"""The `source` shown for runs this workbench trained (the store's `runs.source` is null for them)."""


def run_summary(runs: pl.DataFrame, steps: pl.DataFrame, best_pass1: dict[str, float]) -> pl.DataFrame:
    """One row per run for the Runs page: status, source (the engine that wrote it: "workbench", or
    "verl", "trl", ... for imported runs), allocator in force, steps, best held-out pass@1, generated
    tokens, wall time."""
    if runs.is_empty():
        return pl.DataFrame(schema={c: pl.Utf8 for c in ["run_id", "name", "status"]})
    if steps.is_empty():
        agg = pl.DataFrame(schema={"run_id": pl.Utf8, "steps": pl.Int64, "last_step": pl.Int64,
                                   "tokens": pl.Int64, "train_time_s": pl.Float64, "allocator": pl.Utf8})
    else:
        agg = steps.sort("step").group_by("run_id").agg(
            pl.len().alias("steps"),
            pl.col("step").max().alias("last_step"),
            pl.col("tokens_generated").sum().alias("tokens"),
            # null, not 0, for a run that logged no step time (imported runs)
            pl.when(pl.col("step_time_s").is_not_null().any()).then(pl.col("step_time_s").sum()).alias("train_time_s"),
            pl.col("allocator").last().alias("allocator"),
        )
    out = runs.drop([c for c in ("steps", "last_step", "allocator") if c in runs.columns]).join(agg, on="run_id", how="left")
    cfg_alloc = [_config_allocator(c) for c in out["config"].to_list()] if "config" in out.columns else [None] * out.height
    out = out.with_columns(
        pl.coalesce(pl.col("allocator"), pl.Series(cfg_alloc, dtype=pl.Utf8)).alias("allocator"),
        pl.col("steps").fill_null(0),
        pl.col("tokens").fill_null(0),
        pl.Series("best_pass1", [best_pass1.get(r) for r in out["run_id"].to_list()], dtype=pl.Float64),
    )
    if {"created_at", "updated_at"} <= set(out.columns):
        end = pl.max_horizontal("heartbeat_at", "updated_at") if "heartbeat_at" in out.columns else pl.col("updated_at")
        wall = (end - pl.col("created_at")).dt.total_milliseconds() / 1000.0
        if "source" in out.columns:  # an imported run's row times the import, not the training
            wall = pl.when(pl.col("source").is_null()).then(wall)
        out = out.with_columns(wall.alias("wall_time_s"))
    source = pl.col("source").fill_null(OWN_SOURCE) if "source" in out.columns else pl.lit(OWN_SOURCE)
    out = out.with_columns(source.alias("source"))
    keep = ["name", "status", "source", "allocator", "steps", "best_pass1", "tokens", "wall_time_s", "train_time_s",
            "created_at", "run_id"]
    return out.select([c for c in keep if c in out.columns]).sort("created_at", descending=True, nulls_last=True) \
        if "created_at" in out.columns else out.select([c for c in keep if c in out.columns])


def _config_allocator(config: Any) -> str | None:
    try:
        cfg = json.loads(config) if isinstance(config, str) else (config or {})
        alloc = cfg.get("allocator")
        return alloc.get("name") if isinstance(alloc, dict) else alloc
    except (ValueError, AttributeError):
        return None


def budget_used(allocs: pl.DataFrame) -> pl.DataFrame:
    """Rollouts granted per step and stage, with the budget in force (rollout budgets only; a token
    budget is shown by the tokens chart)."""
    if allocs.is_empty():
        return pl.DataFrame(schema={"step": pl.Int64, "stage": pl.Int64, "granted": pl.Int64, "budget": pl.Int64})
    budget = pl.when(pl.col("budget_kind") == "rollouts").then(pl.col("budget")).otherwise(None) \
        if "budget_kind" in allocs.columns else pl.col("budget")
    return (
        allocs.with_columns(budget.alias("_budget"))
        .group_by(["step", "stage"])
        .agg(pl.col("granted").sum(), pl.col("_budget").max().alias("budget"))
        .sort(["step", "stage"])
    )


def budget_used_from_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """`budget_used` from the steps table alone (no allocation rows read): rollouts per step split
    into the first stage and the later ones when the engine logs `alloc/stage2_rollouts`."""
    schema = {"step": pl.Int64, "stage": pl.Int64, "granted": pl.Int64, "budget": pl.Int64}
    if steps.is_empty():
        return pl.DataFrame(schema=schema)
    later = []
    for metrics in steps["metrics"].to_list() if "metrics" in steps.columns else [None] * steps.height:
        items = dict(metrics) if isinstance(metrics, dict) else {}
        later.append(int(items.get("alloc/stage2_rollouts") or 0))
    budget = (pl.when(pl.col("budget_kind") == "rollouts").then(pl.col("budget")).otherwise(None)
              if "budget_kind" in steps.columns else pl.col("budget"))
    base = steps.select("step", pl.col("rollouts").fill_null(0).alias("total"), budget.alias("budget")) \
        .with_columns(pl.Series("later", later, dtype=pl.Int64))
    first = base.select("step", pl.lit(0).alias("stage"), (pl.col("total") - pl.col("later")).alias("granted"), "budget")
    second = base.filter(pl.col("later") > 0).select("step", pl.lit(1).alias("stage"), pl.col("later").alias("granted"),
                                                     "budget")
    return pl.concat([first.cast(schema), second.cast(schema)]).sort(["step", "stage"])


def rollouts_per_prompt(allocs: pl.DataFrame) -> list[int]:
    """Rollouts granted to each prompt over all stages of the step(s) in `allocs`."""
    if allocs.is_empty():
        return []
    per = allocs.group_by(["step", "prompt_id"]).agg(pl.col("granted").sum())
    return per["granted"].to_list()


def calibration_pairs(allocs: pl.DataFrame, rollouts: pl.DataFrame) -> pl.DataFrame:
    """Predicted pass rate (the stage-0 prediction of each prompt in each step) against the pass
    rate observed over all the group's rollouts in that step (their verdicts, see `workbench.correctness`)."""
    schema = {"step": pl.Int64, "prompt_id": pl.Utf8, "predicted": pl.Float64, "observed": pl.Float64, "n": pl.Int64}
    if allocs.is_empty() or rollouts.is_empty():
        return pl.DataFrame(schema=schema)
    pred = (
        allocs.filter(pl.col("predicted_pass").is_not_null())
        .sort("stage")
        .group_by(["step", "prompt_id"])
        .agg(pl.col("predicted_pass").first().alias("predicted"))
    )
    obs = rollouts.group_by(["step", "prompt_id"]).agg(
        correct_expr(rollouts.columns).mean().alias("observed"), pl.len().alias("n")
    )
    return pred.join(obs, on=["step", "prompt_id"], how="inner").select(list(schema)).cast(schema)


def zero_signal_groups(steps: pl.DataFrame) -> pl.DataFrame:
    """Per step, the number of prompt groups whose rewards did not vary (no GRPO gradient)."""
    if steps.is_empty() or "zero_signal_frac" not in steps.columns:
        return pl.DataFrame(schema={"step": pl.Int64, "zero_signal_groups": pl.Float64})
    return steps.select(
        "step", (pl.col("zero_signal_frac") * pl.col("prompts")).round(0).alias("zero_signal_groups"),
        "zero_signal_frac",
    ).sort("step")


def metric_choices(steps: pl.DataFrame) -> list[str]:
    """The metric picker's names for a run: the numbers it recorded, in the catalogue's order
    (`workbench/metrics.py`), then those the catalogue does not declare (an imported run's own)."""
    long = metrics_long(steps) if "step" in steps.columns else pl.DataFrame()
    seen = set(long.drop_nulls("value")["key"].unique().to_list()) if not long.is_empty() else set()
    order = {m.name: i for i, m in enumerate(CATALOGUE)}

    def rank(name: str) -> tuple[int, str]:
        m = lookup(name)
        return (order[m.name] if m is not None else len(order), name)

    return sorted(seen, key=rank)


def metric_series(steps: pl.DataFrame, name: str) -> pl.DataFrame:
    """Columns step and `name`: one metric of the steps' `metrics` map (steps that lack it left out)."""
    schema = {"step": pl.Int64, name: pl.Float64}
    long = metrics_long(steps, keys=(name,)) if "step" in steps.columns else pl.DataFrame()
    if long.is_empty():
        return pl.DataFrame(schema=schema)
    return long.drop_nulls("value").select("step", pl.col("value").alias(name)).cast(schema).sort("step")


def cumulative_axes(steps: pl.DataFrame) -> pl.DataFrame:
    """Per step of one run: generated tokens so far and training wall time so far (seconds, pauses
    excluded: the sum of step times; null throughout for a run that logged no step time, as imported
    runs do)."""
    s = steps.sort("step")
    timed = "step_time_s" in s.columns and s["step_time_s"].drop_nulls().len() > 0
    out = s.select(
        "step",
        pl.col("tokens_generated").fill_null(0).cum_sum().alias("tokens"),
        (pl.col("step_time_s").fill_null(0.0).cum_sum() if timed else pl.lit(None, dtype=pl.Float64)).alias("wall_s"),
    )
    if out.height and out["step"].min() > 0:  # step 0, before the first update (the first evaluation): nothing yet
        start = pl.DataFrame({"step": [0], "tokens": [0], "wall_s": [0.0 if timed else None]},
                             schema={"step": out.schema["step"], "tokens": out.schema["tokens"], "wall_s": pl.Float64})
        out = pl.concat([start, out], how="vertical_relaxed")
    return out


def reward_curves(per_run: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Mean training reward per step of several runs against generated tokens so far (every run logs
    these, imported ones included). `per_run` maps a run label to its steps. Columns run, step,
    tokens, reward_mean."""
    frames = [cumulative_axes(s).join(s.select("step", "reward_mean"), on="step").with_columns(pl.lit(label).alias("run"))
              for label, s in per_run.items() if not s.is_empty()]
    if not frames:
        return pl.DataFrame(schema={"run": pl.Utf8, "step": pl.Int64, "tokens": pl.Int64, "reward_mean": pl.Float64})
    return pl.concat(frames, how="diagonal_relaxed").select("run", "step", "tokens", "reward_mean")


def group_pass_rates(rewards: pl.DataFrame) -> pl.DataFrame:
    """Per (step, prompt) group of rollouts (columns step, prompt_id, reward, correct): rollouts,
    correct (the verdicts), observed pass rate, and whether the group carried no signal (all rewards equal)."""
    schema = {"step": pl.Int64, "prompt_id": pl.Utf8, "rollouts": pl.Int64, "correct": pl.Int64,
              "pass_rate": pl.Float64, "zero_signal": pl.Boolean}
    if rewards.is_empty():
        return pl.DataFrame(schema=schema)
    return (rewards.group_by(["step", "prompt_id"])
            .agg(pl.len().alias("rollouts"), correct_expr(rewards.columns).sum().alias("correct"),
                 correct_expr(rewards.columns).mean().alias("pass_rate"),
                 (pl.col("reward").n_unique() == 1).alias("zero_signal"))
            .select(list(schema)).cast(schema).sort(["step", "prompt_id"]))


def prompt_visits(rollouts: pl.DataFrame) -> pl.DataFrame:
    """One prompt's visits told by its rollouts alone (columns step, stage, reward, correct), for runs that
    logged no allocation decisions: per step the rollouts it got (`granted`), in how many stages, how
    many were correct, and the observed pass rate (`last_pass`)."""
    schema = {"step": pl.Int64, "granted": pl.Int64, "stages": pl.Int64, "correct": pl.Int64, "last_pass": pl.Float64}
    if rollouts.is_empty():
        return pl.DataFrame(schema=schema)
    return (rollouts.group_by("step")
            .agg(pl.len().alias("granted"), pl.col("stage").n_unique().alias("stages"),
                 correct_expr(rollouts.columns).sum().alias("correct"),
                 correct_expr(rollouts.columns).mean().alias("last_pass"))
            .select(list(schema)).cast(schema).sort("step"))


def busiest_prompt(rewards: pl.DataFrame) -> str | None:
    """The prompt with the most rollouts in a frame (ties: the smallest id)."""
    if rewards.is_empty():
        return None
    counts = rewards.group_by("prompt_id").agg(pl.len().alias("n")).sort(["n", "prompt_id"], descending=[True, False])
    return str(counts["prompt_id"][0])


def compare_curves(per_run: dict[str, tuple[pl.DataFrame, pl.DataFrame]]) -> pl.DataFrame:
    """pass@k of each run against generated tokens and wall time at the evaluated step.
    `per_run` maps a run label to (steps, evals). Columns run, step, tokens, wall_s, k, pass_at_k."""
    frames = []
    for label, (steps, evals) in per_run.items():
        pk = passk_by_step(evals)
        if pk.is_empty() or steps.is_empty():
            continue
        axes = cumulative_axes(steps)
        frames.append(pk.join(axes, on="step", how="inner").with_columns(pl.lit(label).alias("run")))
    if not frames:
        return pl.DataFrame(schema={"run": pl.Utf8, "step": pl.Int64, "tokens": pl.Int64, "wall_s": pl.Float64,
                                    "k": pl.Int64, "pass_at_k": pl.Float64})
    return pl.concat(frames, how="diagonal_relaxed").select("run", "step", "tokens", "wall_s", "k", "pass_at_k")


def entropy_colour(h: float, h_max: float) -> str:
    """Background colour for a token with entropy `h`: white (certain) to orange-red (uncertain)."""
    t = 0.0 if not h_max or h is None or math.isnan(h) else max(0.0, min(1.0, h / h_max))
    r, g, b = 255, int(255 - 150 * t), int(255 - 220 * t)
    return f"rgb({r},{g},{b})"


def token_pieces(response: str, token_ids: list[int] | None, decode: Any | None, *, special: bool = True) -> list[str]:
    """The response split into one piece per generated token: with the run's tokenizer (`decode(ids,
    special)` decodes a list of ids, special tokens kept or dropped), each token as a person reads it
    (`readable_pieces`); without one, one character per token when the lengths agree (character
    tokenizers), else the whole response as a single piece."""
    ids = list(token_ids or [])
    if decode is not None and ids:
        try:
            return readable_pieces(ids, lambda part: decode(part, special))
        except Exception:  # noqa: BLE001 - a tokenizer that can't decode an id: fall back below
            pass
    if ids and len(response) == len(ids):
        return list(response)
    return [response]


BYTES_PER_CHARACTER = 4
"""The most byte tokens one character can take (UTF-8)."""


def readable_pieces(ids: list[int], decode: Any) -> list[str]:
    """Each token's text as it reads in the decoded response: what the token adds to the text decoded
    so far (decoded after the token before it, so that a byte-level BPE 'Ġ' or a SentencePiece '▁' is
    the space it stands for, 'Ċ' the newline, and a SentencePiece word keeps its leading space), and
    a character split over several byte tokens (an emoji, a dash) shown whole on its last token, the
    earlier ones empty. `decode(ids)` returns the text of a list of ids; the pieces joined are the
    response as `decode` gives it (up to a character the response was cut in the middle of)."""
    pieces: list[str] = []
    before: list[int] = []  # the last whole token (or character) before the pending ones
    pending: list[int] = []
    for n, tid in enumerate(ids):
        pending.append(int(tid))
        head = decode(before) if before else ""
        text = decode(before + pending)
        piece = text[len(head):] if text.startswith(head) else decode(pending)
        if piece.endswith("\ufffd") and len(pending) < BYTES_PER_CHARACTER and n + 1 < len(ids):
            pieces.append("")  # a byte of a character that the next tokens complete
            continue
        pieces.append(piece)
        before, pending = pending, []
    return pieces


GAP_FLOOR = 0.05
"""Smallest scale (nats) of the behaviour-vs-trainer colouring: a page whose largest gap is below it (a
synchronous run, where the two differ by float rounding) stays near white instead of showing noise."""


def gap_scale(gaps: list[float | None]) -> float:
    """The colour scale of the gap colouring: the 98th percentile of |gap| over the page's tokens, at
    least GAP_FLOOR."""
    mags = sorted(abs(g) for g in gaps if g is not None)
    return max(GAP_FLOOR, mags[int(0.98 * (len(mags) - 1))]) if mags else GAP_FLOOR


def token_html(pieces: list[str], entropies: list[float] | None, h_max: float = 2.0, *,
               gaps: list[float | None] | None = None, gap_max: float = GAP_FLOOR,
               reused: tuple[int, int | None, int | None, bool] = (0, None, None, False)) -> str:
    """HTML spans, one per token, coloured by entropy, or with `gaps` by the trainer's minus the
    behaviour log-probability (`workbench.analysis.pipeline.token_logprob_gaps`: red where the trainer
    finds the token less likely than the weights that sampled it, green where more, white at 0, grey
    where the update did not compute it; scaled by `gap_max`); `reused` (a speculative rollout's reused
    prefix, first rejected position, draft length, lenient: `app.shape_view.reused_split`) shades the prefix.
    Escaped."""
    from app.shape_view import mark_reused
    from app.terms_view import term_colour

    ents, gs = list(entropies or []), list(gaps or [])
    spans = []
    for i, piece in enumerate(pieces):
        h = ents[i] if i < len(ents) and len(pieces) == len(ents) else None
        text = html.escape(piece).replace("\n", "⏎<br>").replace("\t", "⇥\t") or "&#8203;"
        if gaps is not None:
            g = gs[i] if i < len(gs) and len(pieces) == len(gs) else None
            title = "trainer log-prob not stored" if g is None else f"trainer − behaviour = {g:+.4f} nats"
            spans.append(f'<span title="{title}" style="background:{term_colour(g, -gap_max, gap_max)}">'
                         f"{text}</span>")
        elif h is None:
            spans.append(f"<span>{text}</span>")
        else:
            spans.append(f'<span title="H={h:.3f}" style="background:{entropy_colour(h, h_max)}">{text}</span>')
    spans = mark_reused(spans, *reused) if any(reused) or reused[1] == 0 else spans
    return ('<div style="font-family:monospace;white-space:pre-wrap;line-height:1.6">' + "".join(spans) + "</div>")


ROLLOUT_FIELDS = [
    ("idx", "#", "{}"),
    ("stage", "stage", "{}"),
    ("policy_version", "policy", "{}"),
    ("reward", "reward", "{:.3g}"),
    ("verdict", "verdict", "{}"),
    ("correct", "correct", "{}"),
    ("advantage", "advantage", "{:+.3f}"),
    ("length", "len", "{}"),
    ("entropy_mean", "H mean", "{:.3f}"),
]


PIPELINE_FIELDS = [
    ("staleness", "stale", "{}"),
    ("is_weight_mean", "IS weight", "{:.3f}"),
]
"""The asynchronous pipeline's columns of a rollout (shown for pipelined runs), after its version span."""


def version_span(row: dict) -> str:
    """A rollout's policy versions: `v3`, or `v3→v4 (2 segments)` for a partial rollout continued under
    newer weights; `–` where none was recorded (imported runs)."""
    start, end, segments = row.get("version_start"), row.get("version_end"), row.get("segments")
    if start is None:
        return "–"
    text = f"v{start}" if end is None or end == start else f"v{start}→v{end}"
    return text + (f" ({segments} segments)" if segments and segments > 1 else "")


def _fmt(fmt: str, value: Any) -> str:
    if value is None:
        return "–"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def group_html(rows: list[dict], decode: Any | None = None, h_max: float = 2.0, *, term: str | None = None,
               term_span: tuple[float, float] = (0.0, 0.0), pipelined: bool = False,
               gap_max: float | None = None, special: bool = True) -> str:
    """One prompt's rollouts within a step as an HTML table: the rollout's fields (with `pipelined`, its
    version span, staleness and importance weight), its reward terms (the cell coloured by `term`'s
    value on the scale `term_span`, when a term is picked), then its response with each token coloured
    by entropy (with `gap_max`, by the trainer's minus the behaviour log-probability on that scale), and
    the environment's turns of a multi-turn rollout under it (`observations`, kept apart from the
    response). `special`: the response's special tokens (a chat model's end of turn) shown, else
    left out. Every value is escaped."""
    from app.shape_view import reused_split
    from app.terms_view import terms_cell
    from workbench.analysis.pipeline import token_logprob_gaps

    with_terms = any(r.get("reward_terms") is not None for r in rows)
    labels = [lab for _, lab, _ in ROLLOUT_FIELDS] + (["versions"] + [lab for _, lab, _ in PIPELINE_FIELDS]
                                                      if pipelined else []) + (["reward terms"] if with_terms else [])
    head = "".join(f"<th style='text-align:left;padding:2px 6px'>{html.escape(lab)}</th>" for lab in labels)
    cell = "<td style='padding:2px 6px;white-space:nowrap'>{}</td>"
    body = []
    for r in rows:
        cells = "".join(cell.format(html.escape(_fmt(fmt, r.get(col)))) for col, _, fmt in ROLLOUT_FIELDS)
        if pipelined:
            cells += cell.format(html.escape(version_span(r)))
            cells += "".join(cell.format(html.escape(_fmt(fmt, r.get(col)))) for col, _, fmt in PIPELINE_FIELDS)
        cells += terms_cell(r, term, term_span) if with_terms else ""
        pieces = token_pieces(r.get("response") or "", r.get("token_ids"), decode, special=special)
        gaps = token_logprob_gaps(r.get("token_logprobs"), r.get("token_trainer_logprobs")) \
            if gap_max is not None else None
        tokens = token_html(pieces, r.get("token_entropy"), h_max, gaps=gaps, gap_max=gap_max or GAP_FLOOR,
                            reused=reused_split(r) if len(pieces) == r.get("length") else (0, None, None, False))
        for obs in r.get("observations") or []:
            tokens += f"<div style='color:#666;font-family:monospace'>environment: {html.escape(str(obs))}</div>"
        body.append(f"<tr>{cells}<td style='padding:2px 6px;width:100%'>{tokens}</td></tr>")
    return (  # scrolls sideways in a narrow column (the side-by-side view) instead of overflowing it
        "<div style='overflow-x:auto'><table style='border-collapse:collapse;font-size:0.85rem;width:100%'>"
        f"<thead><tr>{head}<th style='text-align:left;padding:2px 6px;min-width:12rem'>response (tokens "
        f"coloured by {'trainer − behaviour log-prob' if gap_max is not None else 'entropy'})</th>"
        f"</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def group_rollouts(frame: pl.DataFrame) -> list[tuple[int, str, list[dict]]]:
    """The rows of a page grouped by (step, prompt) in the store's order: [(step, prompt_id, rows)]."""
    groups: list[tuple[int, str, list[dict]]] = []
    for row in frame.iter_rows(named=True):
        key = (row["step"], row["prompt_id"])
        if groups and (groups[-1][0], groups[-1][1]) == key:
            groups[-1][2].append(row)
        else:
            groups.append((row["step"], row["prompt_id"], [row]))
    return groups


def group_header(step: int, prompt_id: str, rows: list[dict], text: str | None) -> str:
    """A group's one-line header as escaped HTML: step, prompt, correct count, prompt text."""
    correct = sum(1 for r in rows if (r["correct"] if r.get("correct") is not None
                                      else is_correct(r.get("reward") or 0)))
    t = (f" — <code style='white-space:pre-wrap'>{html.escape(text)}</code>" if text else "")
    return (f"<div style='margin-top:0.6rem'><b>step {step}</b> · prompt <code>{html.escape(str(prompt_id))}</code>"
            f" · {correct}/{len(rows)} correct on this page{t}</div>")
