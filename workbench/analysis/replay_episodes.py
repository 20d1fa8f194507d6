"""What allocation inside episodes (GRPO-RoC, ARPO; docs/episode-allocation.md) would have spent on a logged
episodes run, where the store can tell, and one line saying why where it cannot.

    workbench replay RUN --episodes                 # RoC at the run's own factor, ARPO as logged
    workbench replay RUN --episodes --roc-oversample 1 --json

    from workbench.analysis.replay_episodes import episode_replay
    out = episode_replay(store, run_id)         # {"roc": {...}, "arpo": {...}}: an answer or a "refused" line

GRPO-RoC (`replay_roc`) samples `k` x each grant and keeps the grant. Its decision reads only what the store
keeps of every sampled episode (verdict, tool calls, tool errors, finish reason), so it is replayed over the
stored groups when the run sampled at least `k` x each grant:
1. a group of the run holds `f` x n episodes (`f` the run's `rollout.episodes.roc_oversample`, n its grant);
   RoC at `k` <= `f` reads the first `k` x n of them in generation order (independent whole episodes of one
   stream: a sample of `k` x n), keeps n by `workbench.rollout.roc.select`, and spends what those `k` x n
   sampled (episodes, model tokens);
2. the correct side is deterministic (lowest penalty, ties in generation order): at `k` = `f` it is the
   run's own decision, episode for episode; the wrong side is a uniform draw from the replay's seed, not the
   run's stream (the same in distribution, not in which episodes);
3. refused: a run that stored no episodes (single-turn rollouts carry no tool calls), `k` > `f` (the
   other episodes were never sampled), and `k` < `f` over ARPO-branched groups (a smaller ARPO group would
   have branched differently).

ARPO (`arpo_answer`) grows a group by branching episodes with tokens sampled after a tool result. Those
tokens exist only where the run branched: on a run with `rollout.episodes.arpo_branch` on, the answer is
what it spent (episodes, branches, fill, model tokens sampled once against those trained on: a branch's
shared prefix is sampled by its parent); on any other run the branches were never sampled, and the answer
is that line. Another threshold or alpha cannot be replayed on either: the draws that did not branch are
not stored, and the branches they would have made were never sampled.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from workbench.correctness import run_rule, with_correct
from workbench.errors import DataError
from workbench.readers import RolloutReader
from workbench.rollout.roc import NO_CALL_PENALTY, select

COLUMNS = ["step", "stage", "prompt_id", "idx", "reward", "correct", "verdict", "length", "off_policy", "turns",
           "tool_calls", "tool_errors", "finish_reason", "filter_kept", "parent_idx", "branch_at"]
"""The `rollouts` columns the episode replay reads."""
KEY = ["step", "stage", "prompt_id"]
"""A group: one prompt's episodes of one stage of one step."""
ROC_REPLAY_STREAM = 0x70C5
"""Mixed into the replay's seed for the wrong side's uniform draw of each group."""


def penalties(rows: pl.DataFrame) -> np.ndarray:
    """RoC's penalty from a rollouts frame's counts (`workbench.rollout.roc.penalty` on the stored episode):
    tool error ratio (NO_CALL_PENALTY without a call) + 1 unless the episode ended with "stop"."""
    calls = rows["tool_calls"].fill_null(0).to_numpy().astype(np.float64)
    errors = rows["tool_errors"].fill_null(0).to_numpy().astype(np.float64)
    ratio = np.where(calls > 0, errors / np.maximum(calls, 1.0), NO_CALL_PENALTY)
    return ratio + (rows["finish_reason"].fill_null("").to_numpy() != "stop")


def _model_tokens(rows: pl.DataFrame) -> np.ndarray:
    """An episode's model tokens: its stored `length` (tool results are not counted there)."""
    return rows["length"].fill_null(0).to_numpy().astype(np.int64)


def _episodes_only(rows: pl.DataFrame, run_id: str, method: str) -> str | None:
    if rows.height == 0 or rows["turns"].null_count() == rows.height:
        return (f"{method}: cannot replay run {run_id!r}: it stored no episodes (single-turn rollouts); "
                f"{method} reads tool calls and finish reasons of multi-turn episodes")
    return None


def replay_roc(rows: pl.DataFrame, run_id: str, oversample: int, logged: int, *, min_correct: int = 2,
               min_wrong: int = 2, seed: int = 0) -> dict[str, Any]:
    """RoC at `oversample` over a run that sampled `logged` x each grant (module docstring): its totals and
    per-episode decisions, or {"refused": one line}."""
    refused = _episodes_only(rows, run_id, "RoC")
    if refused:
        return {"refused": refused}
    if oversample < 1:
        raise DataError(f"replay: --roc-oversample must be >= 1, got {oversample}")
    if oversample > logged:
        return {"refused": f"RoC x{oversample}: cannot replay run {run_id!r}: it sampled {logged} episode(s) per "
                           f"granted one (rollout.episodes.roc_oversample = {logged}); the other "
                           f"{oversample - logged} were never sampled"}
    branched = "parent_idx" in rows.columns and rows["parent_idx"].null_count() < rows.height
    if oversample < logged and branched:
        return {"refused": f"RoC x{oversample}: cannot replay run {run_id!r} below its own x{logged}: its groups "
                           "are ARPO trees, and a smaller ARPO group would have branched differently"}
    rows = rows.sort(KEY + ["idx"])
    pen, ok, tokens = penalties(rows), rows["correct"].fill_null(False).to_numpy(), _model_tokens(rows)
    errors = rows["tool_errors"].fill_null(0).to_numpy()
    calls = rows["tool_calls"].fill_null(0).to_numpy()
    stored = rows["filter_kept"].to_numpy() if rows["filter_kept"].null_count() == 0 else None
    ids = rows["idx"].to_numpy()
    out_rows, agree, groups = [], [0, 0], 0
    t = {"sampled": 0, "kept": 0, "tokens": 0, "dropped_tokens": 0, "kc": 0, "ke": 0, "sc": 0, "se": 0}
    for i, (key, g) in enumerate(rows.with_row_index("_i").group_by(KEY, maintain_order=True)):
        idx = g["_i"].to_numpy()
        if len(idx) % logged:
            return {"refused": f"RoC x{oversample}: cannot replay run {run_id!r}: the group of step {key[0]}, stage "
                               f"{key[1]}, prompt {key[2]!r} holds {len(idx)} episodes, not {logged} x a grant"}
        n = len(idx) // logged
        idx = idx[:oversample * n]  # the first k x n in generation order: what RoC at k would have sampled
        rng = np.random.default_rng([seed % (1 << 63), i, ROC_REPLAY_STREAM])
        sel = select(ok[idx], pen[idx], n, rng, min_correct=min_correct, min_wrong=min_wrong)
        groups += 1
        if stored is not None and oversample == logged:
            right = ok[idx]
            agree[0] += bool(np.array_equal(sel.kept[right], stored[idx][right]))
            agree[1] += 1
        kept = idx[sel.kept]
        t["sampled"] += len(idx)
        t["kept"] += len(kept)
        t["tokens"] += int(tokens[idx].sum())
        t["dropped_tokens"] += int(tokens[idx[~sel.kept]].sum())
        for name, part in (("k", kept[ok[kept]]), ("s", idx[ok[idx]])):
            t[name + "c"] += int(calls[part].sum())
            t[name + "e"] += int(errors[part].sum())
        out_rows += [(*key, int(ids[j]), bool(k), float(pen[j]), why)
                     for j, k, why in zip(idx, sel.kept, sel.reasons)]
    decisions = pl.DataFrame(out_rows, schema=KEY + ["idx", "kept", "penalty", "reason"], orient="row")
    return {"oversample": oversample, "logged_oversample": logged, "groups": groups,
            "episodes_sampled": t["sampled"], "episodes_kept": t["kept"], "model_tokens_sampled": t["tokens"],
            "model_tokens_dropped": t["dropped_tokens"],
            "kept_correct_tool_error_rate": t["ke"] / t["kc"] if t["kc"] else 0.0,
            "sampled_correct_tool_error_rate": t["se"] / t["sc"] if t["sc"] else 0.0,
            "correct_side_as_logged": None if not agree[1] else agree[0] / agree[1],
            "decisions": decisions}


def arpo_answer(rows: pl.DataFrame, turns: pl.DataFrame | None, run_id: str, branched_run: bool) -> dict[str, Any]:
    """What ARPO spent on a run that branched (module docstring), or {"refused": one line}. `turns`: the run's
    episode turns (columns step, stage, prompt_id, idx, role, prompt, token_ids), for a branch's shared tokens."""
    refused = _episodes_only(rows, run_id, "ARPO")
    if refused:
        return {"refused": refused}
    if not branched_run:
        return {"refused": f"ARPO: cannot replay run {run_id!r}: its branches would continue episodes after a tool "
                           "result with tokens this run never sampled (rollout.episodes.arpo_branch was off)"}
    branches = rows.filter(pl.col("parent_idx").is_not_null())
    shared = shared_model_tokens(branches, turns) if turns is not None else 0
    trained = int(_model_tokens(rows).sum())
    return {"episodes": rows.height, "branches": branches.height, "whole": rows.height - branches.height,
            "model_tokens_trained": trained, "model_tokens_sampled": trained - shared,
            "model_tokens_shared": shared,
            "cannot": "another arpo_threshold or arpo_alpha: the draws that did not branch are not stored, and the "
                      "branches they would have made were never sampled"}


def shared_model_tokens(branches: pl.DataFrame, turns: pl.DataFrame) -> int:
    """Model tokens the branches in `branches` hold before their branch point (sampled by their parents)."""
    if branches.height == 0:
        return 0
    resp = (turns.filter(~pl.col("prompt").fill_null(False))
            .join(branches.select(KEY + ["idx", "branch_at"]), on=KEY + ["idx"])
            .with_columns(n=pl.col("token_ids").list.len())
            .sort(KEY + ["idx", "turn"])
            .with_columns(end=pl.col("n").cum_sum().over(KEY + ["idx"])))
    before = resp.filter((pl.col("end") <= pl.col("branch_at")) & (pl.col("role") == "assistant"))
    return int(before["n"].sum() or 0)


def episode_replay(store: RolloutReader, run_id: str, *, roc_oversample: int | None = None,
                   seed: int | None = None) -> dict[str, Any]:
    """RoC's and ARPO's answers on run `run_id` (module docstring): {"run_id", "roc": {...}, "arpo": {...}},
    each an answer or {"refused": one line}. `roc_oversample` defaults to the run's own factor (1: uniform)."""
    run = store.run(run_id)
    cfg = run.get("config") or {}
    ep = ((cfg.get("rollout") or {}).get("episodes") or {})
    logged = int(ep.get("roc_oversample") or 1)
    n = store.count_rollouts(run_id)
    rows = store.rollouts(run_id, limit=max(n, 1), columns=COLUMNS)
    rows = with_correct(rows, run_rule(cfg)).filter(~pl.col("off_policy").fill_null(False))
    roc = replay_roc(rows, run_id, roc_oversample or logged, logged,
                     min_correct=int(ep.get("roc_min_correct", 2)), min_wrong=int(ep.get("roc_min_wrong", 2)),
                     seed=int(run.get("seed") or 0) if seed is None else seed)
    branched = bool(ep.get("arpo_branch")) and rows.height > 0 and rows["parent_idx"].null_count() < rows.height
    turns = None
    if branched:
        turns = store.episode_turns(run_id, columns=KEY + ["idx", "turn", "role", "prompt", "token_ids"])
    arpo = arpo_answer(rows, turns, run_id, bool(ep.get("arpo_branch")))
    if bool(ep.get("arpo_branch")) and not branched and "refused" not in arpo:
        arpo["note"] = "no group branched: every slot was filled with a whole episode"
    return {"run_id": run_id, "roc": roc, "arpo": arpo}
