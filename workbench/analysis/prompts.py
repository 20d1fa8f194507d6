"""Runs compared prompt by prompt: which prompts did run B learn that run A never did, which did it lose.

    from workbench.analysis import compare_runs, compare_steps
    cmp = compare_runs(store, [run_a, run_b], basis="tokens")   # or "step", "end"
    cmp.frame          # one row per prompt: each run's pass rate, B - A with its interval, a change label
    cmp.sides          # per run: its letter, the point compared, the window, how its prompts matched A's
    compare_steps(store, run_id, before=40, after=200)          # one run, two points

The point of each run (its *basis*): the same step (`at`, default the shortest run's last step), the
same generated tokens (`at`, default the fewest any run generated; each run at the first step that
reached them, its end if it never did), or each run's end. Around that point a window of steps
(`window`; by default wide enough that the run's prompt pool comes round about twice), shifted to stay
inside the run.

Per prompt and run: the training pass rate in the window (correct / rollouts, correctness as the store
says it: `workbench.store.prompt_reader.correct_condition`), whether the run had solved it at all up to
the window's end, and the held-out pass rate (evals in the window, else the latest evaluation before
its end) where the prompt was evaluated. Runs are lettered A, B, C... in the order given; each later run
is compared with A: `diff_B = pass_B - pass_A` with a 95% Newcombe hybrid score interval (method 10 of
Newcombe 1998, built from each side's Wilson score interval), the same for held-out rates, and
`change_B`, one of CHANGES (from the training rates, or the held-out ones for a prompt evaluated but not
trained on).

Prompts are matched by their text (stripped) where both runs stored it, else by prompt id: an imported
run (ids hashed from the text) lines up with ours. `sides.match_rate` is the share of a run's prompts
that run A also has.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from workbench.errors import DataError
from workbench.readers import RolloutReader

BASES = ("step", "tokens", "end")
LEARNED, BETTER, LOST, SAME, ONE_SIDE = ("learned by {b}, never by {a}", "better in {b}", "lost by {b}",
                                         "no clear change", "only in one")
CHANGES = (LEARNED, BETTER, LOST, SAME, ONE_SIDE)
"""The `change_X` labels (with {a}, {b} filled in by the runs' letters)."""
Z95 = 1.959963984540054
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class PromptComparison:
    """What `compare_runs` / `compare_steps` return."""

    frame: pl.DataFrame
    """One row per prompt (see the module docstring for the columns)."""
    sides: pl.DataFrame
    """One row per run compared: letter, run_id, label, basis, step (the point), step_min, step_max (the
    window), tokens (generated up to the point), prompts, matched, match_rate, matched_by."""
    interval: str = "95% Newcombe hybrid score interval (from Wilson score intervals)"


@dataclass(frozen=True)
class _Side:
    run_id: str
    label: str
    step: int
    step_min: int
    step_max: int
    tokens: int | None


def wilson(correct: pl.Expr, n: pl.Expr, z: float = Z95) -> tuple[pl.Expr, pl.Expr]:
    """Wilson score interval (low, high) of correct / n, as Polars expressions (null where n is 0)."""
    n = pl.when(n > 0).then(n.cast(pl.Float64))
    p = correct.cast(pl.Float64) / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)).sqrt()) / (1 + z * z / n)
    return centre - half, centre + half


def diff_interval(ca: pl.Expr, na: pl.Expr, cb: pl.Expr, nb: pl.Expr,
                  z: float = Z95) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """pb - pa and its Newcombe hybrid score interval (low, high), as Polars expressions."""
    pa = ca.cast(pl.Float64) / pl.when(na > 0).then(na.cast(pl.Float64))
    pb = cb.cast(pl.Float64) / pl.when(nb > 0).then(nb.cast(pl.Float64))
    la, ua = wilson(ca, na, z)
    lb, ub = wilson(cb, nb, z)
    d = pb - pa
    return d, d - ((pb - lb) ** 2 + (ua - pa) ** 2).sqrt(), d + ((ub - pb) ** 2 + (pa - la) ** 2).sqrt()


def compare_runs(store: RolloutReader, run_ids: list[str], *, basis: str = "end", at: int | None = None,
                 window: int | None = None, labels: list[str] | None = None) -> PromptComparison:
    """Two or more runs compared prompt by prompt at a common point (see the module docstring)."""
    run_ids = list(run_ids)
    if len(run_ids) < 2:
        raise DataError(f"compare_runs: run_ids needs two or more runs, got {len(run_ids)}")
    if len(run_ids) > len(LETTERS):
        raise DataError(f"compare_runs: at most {len(LETTERS)} runs, got {len(run_ids)}")
    if basis not in BASES:
        raise DataError(f"compare_runs: basis {basis!r} is not one of {', '.join(BASES)}")
    if labels is not None and len(labels) != len(run_ids):
        raise DataError(f"compare_runs: labels has {len(labels)} entries for {len(run_ids)} runs")
    steps = _steps(store, run_ids)
    texts = {rid: store.prompt_texts(rid) for rid in dict.fromkeys(run_ids)}
    if labels is None:
        from workbench.analysis.frames import pick_runs

        named = pick_runs(store, list(dict.fromkeys(run_ids)))
        labels = [dict(zip(named["run_id"], named["label"]))[rid] for rid in run_ids]
    if at is None and basis == "step":
        at = min(int(s["step"].max()) for s in steps.values())
    if at is None and basis == "tokens":
        at = min(int(s["tokens"].max()) for s in steps.values())
    sides = []
    for i, rid in enumerate(run_ids):
        s = steps[rid]
        point = _point(s, basis, at)
        w = window or auto_window(store, rid, s, texts[rid])
        lo, hi = _window(s, point, w)
        sides.append(_Side(rid, labels[i], point, lo, hi, _tokens_at(s, point)))
    return _compare(store, sides, basis, texts)


def compare_steps(store: RolloutReader, run_id: str, before: int, after: int, *, window: int | None = None) -> PromptComparison:
    """One run compared with itself: the window around step `before` (A) against the window around
    step `after` (B)."""
    s = _steps(store, [run_id])[run_id]
    texts = {run_id: store.prompt_texts(run_id)}
    w = window or auto_window(store, run_id, s, texts[run_id])
    sides = []
    for point in (before, after):
        p = _point(s, "step", point)
        lo, hi = _window(s, p, w)
        sides.append(_Side(run_id, f"step {p}", p, lo, hi, _tokens_at(s, p)))
    return _compare(store, sides, "step", texts)


def auto_window(store: RolloutReader, run_id: str, steps: pl.DataFrame | None = None, texts: pl.DataFrame | None = None) -> int:
    """The default window in steps: enough that the run's train prompts come round about twice at its
    mean prompts per step (at least 3 steps, at most the run's length)."""
    s = _steps(store, [run_id])[run_id] if steps is None else steps
    per_step = float(s["prompts"].drop_nulls().mean() or 0) if "prompts" in s.columns else 0.0
    texts = store.prompt_texts(run_id) if texts is None else texts
    pool = texts.filter(pl.col("split") != "eval").height if texts.height else 0
    if per_step <= 0 or pool == 0:
        return min(10, s.height)
    return int(max(3, min(s.height, round(2 * pool / per_step))))


def _steps(store: RolloutReader, run_ids: list[str]) -> dict[str, pl.DataFrame]:
    """Each run's steps (one read for all) with `tokens`, the generated tokens up to each step."""
    ids = list(dict.fromkeys(run_ids))
    s = store.run_steps(ids).select("run_id", "step", "prompts", "tokens_generated")
    out = {}
    for rid in ids:
        mine = s.filter(pl.col("run_id") == rid)
        if mine.height == 0:
            raise DataError(f"run {rid}: no steps logged yet, nothing to compare")
        out[rid] = mine.sort("step").with_columns(pl.col("tokens_generated").fill_null(0).cum_sum().alias("tokens"))
    return out


def _point(s: pl.DataFrame, basis: str, at: int | None) -> int:
    if basis == "end":
        return int(s["step"].max())
    if basis == "step":
        before = s.filter(pl.col("step") <= at)
        return int(before["step"].max()) if before.height else int(s["step"].min())
    reached = s.filter(pl.col("tokens") >= at)
    return int(reached["step"].min()) if reached.height else int(s["step"].max())


def _window(s: pl.DataFrame, point: int, width: int) -> tuple[int, int]:
    first, last = int(s["step"].min()), int(s["step"].max())
    lo = max(first, point - width // 2)
    hi = min(last, lo + width - 1)
    return max(first, hi - width + 1), hi


def _tokens_at(s: pl.DataFrame, point: int) -> int | None:
    row = s.filter(pl.col("step") == point)
    return int(row["tokens"][0]) if row.height else None


def _outcomes(store: RolloutReader, side: _Side, to_date: bool) -> pl.DataFrame:
    """Per prompt id of one side: training and held-out counts in its window, and (`to_date`: run A,
    whose "never solved" the labels ask; the whole run up to the window is read only for it) up to its
    end. Held-out "ever" costs nothing extra and is there for every side."""
    train = store.prompt_outcomes(side.run_id, side.step_min, side.step_max, to_date=to_date)
    ev = store.evals(side.run_id)
    ev = ev.filter(pl.col("step") <= side.step_max) if ev.height else ev
    if ev.height:
        inside = ev.filter(pl.col("step") >= side.step_min)
        if inside.height == 0:  # no evaluation in the window: the latest one before its end
            inside = ev.filter(pl.col("step") == ev["step"].max())
        held = inside.group_by("prompt_id").agg(pl.col("samples").sum().alias("eval_samples"),
                                                pl.col("correct").sum().alias("eval_correct"))
        ever = ev.group_by("prompt_id").agg((pl.col("correct").sum() > 0).alias("eval_ever"))
        held = held.join(ever, on="prompt_id", how="full", coalesce=True)
    else:
        held = pl.DataFrame(schema={"prompt_id": pl.Utf8, "eval_samples": pl.Int64, "eval_correct": pl.Int64,
                                    "eval_ever": pl.Boolean})
    out = train.select("prompt_id", "rollouts", "correct", (pl.col("correct_to_date") > 0).alias("ever"), "last_step")
    return out.join(held, on="prompt_id", how="full", coalesce=True).with_columns(
        pl.col("rollouts", "correct").fill_null(0).cast(pl.Int64),
        pl.col("eval_samples", "eval_correct").fill_null(0).cast(pl.Int64))


def _key() -> pl.Expr:
    """A prompt's match key: its stripped text, or "id:<prompt_id>" where it has none."""
    return pl.coalesce(pl.col("text").str.strip_chars().replace("", None), pl.lit("id:") + pl.col("prompt_id"))


def _keyed(outcomes: pl.DataFrame, texts: pl.DataFrame) -> pl.DataFrame:
    """One side's outcomes keyed by `_key`, with the prompt's fields (prompts sharing a text summed)."""
    out = outcomes.join(texts, on="prompt_id", how="left")
    return (out.with_columns(_key().alias("key"))
            .group_by("key").agg(pl.col("prompt_id").min(), pl.col("text").first(), pl.col("split").first(),
                                 pl.col("level").first(), pl.col("tag").first(),
                                 pl.col("rollouts", "correct", "eval_samples", "eval_correct").sum(),
                                 pl.col("ever").any(ignore_nulls=False), pl.col("eval_ever").any(), pl.col("last_step").max()))


def _compare(store: RolloutReader, sides: list[_Side], basis: str, run_texts: dict[str, pl.DataFrame]) -> PromptComparison:
    letters = LETTERS[:len(sides)]
    texts = [run_texts[s.run_id] for s in sides]
    outcomes = [_outcomes(store, s, to_date=i == 0) for i, s in enumerate(sides)]
    keyed = [_keyed(o, t) for o, t in zip(outcomes, texts)]
    prompt_keys = [set(_all_keys(o, t)) for o, t in zip(outcomes, texts)]
    frame = None
    for x, k in zip(letters, keyed):
        part = k.rename({c: f"{c}_{x}" for c in k.columns if c not in ("key", "text", "split", "level", "tag")})
        part = part.rename({c: f"{c}__{x}" for c in ("text", "split", "level", "tag")})
        frame = part if frame is None else frame.join(part, on="key", how="full", coalesce=True)
    assert frame is not None
    for c in ("text", "split", "level", "tag"):
        frame = frame.with_columns(pl.coalesce([f"{c}__{x}" for x in letters]).alias(c)).drop(
            [f"{c}__{x}" for x in letters])
    frame = frame.with_columns([e for x in letters for e in _pass(x)])
    for x in letters[1:]:
        frame = frame.with_columns(*_diffs("A", x)).with_columns(_change("A", x))
    first = ["key", "text", "prompt_id_A", "split", "level", "tag"]
    frame = frame.select(first + [c for c in frame.columns if c not in first]).rename({"text": "prompt"})
    frame = frame.sort([f"diff_{letters[1]}", "key"], descending=[True, False], nulls_last=True)
    rows = []
    for x, side, keys in zip(letters, sides, prompt_keys):
        matched = len(keys & prompt_keys[0])
        by_text = all(not k.startswith("id:") for k in keys & prompt_keys[0])
        rows.append({"letter": x, "run_id": side.run_id, "label": side.label, "basis": basis, "step": side.step,
                     "step_min": side.step_min, "step_max": side.step_max, "tokens": side.tokens,
                     "prompts": len(keys), "matched": matched, "match_rate": matched / len(keys) if keys else None,
                     "matched_by": "text" if by_text else "prompt id"})
    return PromptComparison(frame=frame, sides=pl.DataFrame(rows))


def _all_keys(outcomes: pl.DataFrame, texts: pl.DataFrame) -> list[str]:
    """The match keys of every prompt a run stored or has outcomes for."""
    ids = pl.concat([texts.select("prompt_id", "text"),
                     outcomes.select("prompt_id").join(texts, on="prompt_id", how="anti")
                     .with_columns(pl.lit(None, pl.Utf8).alias("text"))])
    return ids.select(_key().alias("key"))["key"].unique().to_list()


def _pass(x: str) -> list[pl.Expr]:
    n, c, en, ec = (pl.col(f"{f}_{x}").fill_null(0) for f in ("rollouts", "correct", "eval_samples", "eval_correct"))
    return [(c.cast(pl.Float64) / pl.when(n > 0).then(n)).alias(f"pass_{x}"),
            (ec.cast(pl.Float64) / pl.when(en > 0).then(en)).alias(f"eval_pass_{x}")]


def _diffs(a: str, b: str) -> list[pl.Expr]:
    out = []
    for pre, n, c in (("", "rollouts", "correct"), ("eval_", "eval_samples", "eval_correct")):
        d, lo, hi = diff_interval(pl.col(f"{c}_{a}").fill_null(0), pl.col(f"{n}_{a}").fill_null(0),
                                  pl.col(f"{c}_{b}").fill_null(0), pl.col(f"{n}_{b}").fill_null(0))
        out += [d.alias(f"{pre}diff_{b}"), lo.alias(f"{pre}diff_{b}_lo"), hi.alias(f"{pre}diff_{b}_hi")]
    return out


def _change(a: str, b: str) -> pl.Expr:
    """The change label of run b against run a: from training rates where both trained on the prompt
    in their windows, else from held-out rates."""
    trained = pl.col(f"diff_{b}").is_not_null()
    lo = pl.when(trained).then(pl.col(f"diff_{b}_lo")).otherwise(pl.col(f"eval_diff_{b}_lo"))
    hi = pl.when(trained).then(pl.col(f"diff_{b}_hi")).otherwise(pl.col(f"eval_diff_{b}_hi"))
    never_a = pl.when(trained).then(~pl.col(f"ever_{a}").fill_null(False)).otherwise(
        ~pl.col(f"eval_ever_{a}").fill_null(False))
    return (pl.when(lo.is_null()).then(pl.lit(ONE_SIDE))
            .when((lo > 0) & never_a).then(pl.lit(LEARNED.format(a=a, b=b)))
            .when(lo > 0).then(pl.lit(BETTER.format(b=b)))
            .when(hi < 0).then(pl.lit(LOST.format(b=b)))
            .otherwise(pl.lit(SAME)).alias(f"change_{b}"))
