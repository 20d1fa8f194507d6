"""One step of an imported run as store rows: groups and prompt ids, per-step metrics, the rollouts
table, the prompts, and the StepRecord (training) or `evals` rows (validation). Vectorised (polars, no
per-row Python). Input: the normalised frame of `workbench.integrations.common` for one step."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import polars as pl

from workbench.correctness import DEFAULT, Rule, with_correct
from workbench.store import StepRecord
from workbench.tasks.rewards import frame_terms, term_means, terms_array


EPISODE_COUNTS = ("turns", "tool_calls", "tool_errors", "tool_tokens")
"""Columns of an episode-carrying frame copied into `rollouts` (`Episode.summary()`)."""
LOGGED = "metric/"
"""Prefix of a frame column holding a step metric the trainer logged (one value per step file)."""


def prompt_id(text: str) -> str:
    """A prompt's stable id: the first 16 hex digits of BLAKE2b of its text (the same text gets the same
    id in every step, run and process, so the Prompt page's history works)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def prompt_ids(texts: pl.Series) -> pl.Series:
    """`prompt_id` of each text of a column."""
    uniq = texts.unique(maintain_order=True)
    ids = [prompt_id(t) for t in uniq.to_list()]
    mapping = pl.DataFrame({"prompt": uniq, "prompt_id": ids})
    return pl.DataFrame({"prompt": texts}).join(mapping, on="prompt", how="left", maintain_order="left")["prompt_id"]


def with_groups(frame: pl.DataFrame) -> pl.DataFrame:
    """Add prompt_id and idx (0.. within each group, in file order). One step's frame: without a
    `group` column, rows with equal prompt text are one group; with one (the trainer's own group key),
    the k-th further group of a prompt text in the step gets the prompt id `<id>~k`, so two groups of
    one prompt stay apart in every reader that groups by (step, prompt_id)."""
    frame = frame.with_columns(prompt_id=prompt_ids(frame["prompt"]))
    if "group" in frame.columns:
        ranks = (frame.select("prompt_id", "group").unique(maintain_order=True)
                 .with_columns(rank=pl.int_range(pl.len(), dtype=pl.Int64).over("prompt_id")))
        frame = frame.join(ranks, on=["prompt_id", "group"], how="left", maintain_order="left").with_columns(
            prompt_id=pl.when(pl.col("rank") > 0)
            .then(pl.col("prompt_id") + "~" + pl.col("rank").cast(pl.Utf8))
            .otherwise(pl.col("prompt_id"))).drop("rank")
    return frame.with_columns(idx=pl.int_range(pl.len(), dtype=pl.Int32).over("prompt_id"))


def group_sizes(frame: pl.DataFrame) -> pl.Series:
    """Rollouts per group of one step's normalised frame (the group key, else the prompt text)."""
    return frame.group_by("group" if "group" in frame.columns else "prompt").len()["len"]


def group_table(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per group: n, mean reward, correct (verdicts, see workbench.correctness), signal
    (reward varies), tokens."""
    aggs = [pl.len().alias("n"), pl.col("reward").mean().alias("pass_mean"),
            pl.col("correct").sum().alias("correct"),
            (pl.col("reward").n_unique() > 1).alias("has_signal")]
    if "length" in frame.columns:
        aggs.append(pl.col("length").sum().alias("tokens"))
    return frame.group_by("prompt_id", maintain_order=True).agg(aggs)


def step_metrics(frame: pl.DataFrame, groups: pl.DataFrame, source: str) -> dict[str, Any]:
    """Per-step metrics computed from the step's rollouts (namespaced like the engine's)."""
    n = frame.height
    reward = frame["reward"]
    m: dict[str, Any] = {
        "rollout/count": n, "rollout/prompts": groups.height,
        "rollout/reward_mean": float(reward.mean()) if n else None,
        "rollout/reward_std": float(reward.std(ddof=0)) if n else None,
        "rollout/zero_signal_frac": float(1.0 - groups["has_signal"].mean()) if groups.height else None,
        "rollout/frac_all_correct": float((groups["correct"] == groups["n"]).mean()) if groups.height else None,
        "rollout/frac_all_wrong": float((groups["correct"] == 0).mean()) if groups.height else None,
        "rollout/group_size_mean": float(groups["n"].mean()) if groups.height else None,
        "rollout/response_chars_mean": float(frame["response"].str.len_chars().mean()) if n else None,
        "alloc/allocator": source, "alloc/budget_kind": "rollouts", "alloc/budget": n,
    }
    if "length" in frame.columns and frame["length"].null_count() < n:
        m["rollout/tokens_generated"] = int(frame["length"].sum())
        m["rollout/length_mean"] = float(frame["length"].mean())
        m["rollout/length_max"] = int(frame["length"].max())
    if "advantage" in frame.columns and frame["advantage"].null_count() < n:
        m["rollout/advantage_abs_mean"] = float(frame["advantage"].abs().mean())
    m.update(term_means(frame_terms(frame)))  # reward/<term>
    return {k: v for k, v in m.items() if v is not None}


def rollout_table(frame: pl.DataFrame) -> Any:
    """The store's rollouts columns as an Arrow table (the writer casts to the store's types)."""
    cols = [pl.lit(0, pl.Int32).alias("stage"), "prompt_id", "idx", "response",
            pl.col("reward").cast(pl.Float32), pl.col("correct").cast(pl.Boolean), pl.lit(False).alias("off_policy"),
            pl.lit(True).alias("used_in_update")]
    if "observations" in frame.columns:
        cols.append(pl.col("observations").cast(pl.List(pl.Utf8)))
    if "length" in frame.columns:
        cols.append(pl.col("length").cast(pl.Int32))
    if "advantage" in frame.columns:
        cols.append(pl.col("advantage").cast(pl.Float32))
    if "token_ids" in frame.columns:
        cols.append(pl.col("token_ids").cast(pl.List(pl.Int32)))
    if "token_logprobs" in frame.columns:
        cols += [pl.col("token_logprobs").cast(pl.List(pl.Float32)),
                 pl.col("token_logprobs").list.sum().cast(pl.Float32).alias("logprob_sum")]
    cols += [pl.col(c).cast(pl.Int32) for c in EPISODE_COUNTS if c in frame.columns]
    table = frame.select(cols).to_arrow()
    terms = frame_terms(frame)
    return table.append_column("reward_terms", terms_array(terms, frame.height)) if terms else table


def prompt_rows(frame: pl.DataFrame, split: str, known: set[str] | None = None) -> list[dict[str, Any]]:
    """The step's prompts (first row of each group) as `prompts` rows, less those in `known` (prompt ids
    the run already stores; they are added to it). Prompts recur across steps: passing only new ones
    saves converting the same text again at every step."""
    cols = ["prompt_id", pl.col("prompt").alias("text")]
    if "answer" in frame.columns:
        cols.append("answer")
    firsts = frame.group_by("prompt_id", maintain_order=True).first().select(cols)
    if known is not None:
        firsts = firsts.filter(~pl.col("prompt_id").is_in(pl.Series(list(known), dtype=pl.Utf8)))
        known.update(firsts["prompt_id"].to_list())
    return firsts.with_columns(pl.lit(split).alias("split")).to_dicts()


def train_record(run_id: str, step: int, frame: pl.DataFrame, source: str,
                 known: set[str] | None = None, rule: Rule = DEFAULT) -> StepRecord:
    """One training step file as one StepRecord: rollouts, per-group allocation rows (the framework's
    fixed group size, logged as allocator `source`), prompts and step metrics. A row's correctness is
    its logged verdict, else `rule` over its reward."""
    frame = with_correct(with_groups(frame), rule)
    groups = group_table(frame)
    n = frame.height
    allocs = groups.select(
        "prompt_id", pl.lit(0, pl.Int32).alias("stage"), pl.lit(source).alias("allocator"),
        pl.col("n").cast(pl.Int32).alias("asked"), pl.col("n").cast(pl.Int32).alias("granted"),
        pl.lit(f"logged by {source}").alias("reason"), pl.lit("rollouts").alias("budget_kind"),
        pl.lit(n, pl.Int64).alias("budget"), pl.lit(0, pl.Int64).alias("budget_left"),
        pl.lit(True).alias("used_in_update")).to_dicts()
    metrics = step_metrics(frame, groups, source)
    logged = [c for c in frame.columns if c.startswith(LOGGED)]
    metrics.update({c[len(LOGGED):]: frame[c][0] for c in logged})
    turns, calls = episode_tables(frame)
    return StepRecord(run_id, step, metrics=metrics, rollouts=rollout_table(frame.drop(logged)),
                      allocations=allocs, prompts=prompt_rows(frame, "train", known), turns=turns, tool_calls=calls)


def episode_tables(frame: pl.DataFrame) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The `turns` and `tool_calls` rows of a frame whose `episode` column holds each rollout's
    `episode_rows` as JSON ([turn rows, call rows]), keyed by the rollout's stage, prompt_id and idx."""
    if "episode" not in frame.columns:
        return [], []
    turns: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for pid, idx, text in frame.select("prompt_id", "idx", "episode").iter_rows():
        if text is None:
            continue
        key = {"stage": 0, "prompt_id": pid, "idx": int(idx)}
        t, c = json.loads(text)
        turns += [{**key, **row} for row in t]
        calls += [{**key, **row} for row in c]
    return turns, calls


def eval_rows(frame: pl.DataFrame, known: set[str] | None = None,
              rule: Rule = DEFAULT) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Validation samples as `evals` rows (one per prompt: samples, correct, mean_length) and prompts.
    A sample is correct by its logged verdict (verl `acc`), else by `rule` over its reward. Samples of
    one prompt are pooled whatever their group (pass@k counts samples of a prompt)."""
    frame = with_correct(with_groups(frame.drop("group", strict=False)), rule)
    aggs = [pl.len().cast(pl.Int32).alias("samples"), pl.col("correct").sum().cast(pl.Int32).alias("correct")]
    if "length" in frame.columns:
        aggs.append(pl.col("length").mean().alias("mean_length"))
    rows = frame.group_by("prompt_id", maintain_order=True).agg(aggs).to_dicts()
    return rows, prompt_rows(frame, "eval", known)
