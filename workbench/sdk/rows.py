"""One `log_rollouts` call as the store's `rollouts` rows: inputs checked, columns built from flat
arrays (no per-token Python), and what was wrong with them.

Every check names the argument and the row. A call whose lengths disagree is refused whole (nothing of
it is stored, the reason is returned); rows with a NaN or infinite reward are left out (the others go
in); a response that is not valid UTF-8 is stored with U+FFFD in place of the bad bytes. Each of these
comes back as a warning that the run records as an event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from workbench.correctness import Rule
from workbench.episodes import Episode, episode_rows
from workbench.errors import DataError
from workbench.integrations.records import prompt_id
from workbench.tasks.rewards import METRIC_PREFIX, terms_array

PER_ROW = ("answers", "advantages", "correct", "verdicts", "finish_reasons", "groups", "episodes")
"""Optional per-rollout arguments of `log_rollouts` (one value per rollout)."""
PER_TOKEN = ("token_ids", "token_entropy", "token_logprobs")
"""Optional per-token arguments (one sequence per rollout, the same length for one rollout)."""
RANK_IDX_STRIDE = 1_000_000
"""A data-parallel rank's rollouts of a step are numbered from rank x this (`rollouts.idx`), so the
ranks of one job never give two rows one key."""


@dataclass
class Built:
    """The rows of one call (None when it was refused) and the warnings it raised."""

    table: pa.Table | None
    prompts: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    """Rows of `turns` of the kept rollouts' episodes (keyed by stage, prompt_id, idx)."""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def _as_list(name: str, value: Any) -> Any:
    """One value per rollout: a list, or a numpy array (a tensor is moved to the CPU as one)."""
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return list(value) if value.ndim > 1 else value
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise DataError(f"{name}: expected a sequence (list, array or tensor) with one value per rollout, "
                        f"got {type(value).__name__}")
    return value


def _text(name: str, values: list[Any], warnings: list[str]) -> list[str]:
    """Strings, each valid UTF-8 (bad bytes or lone surrogates replaced, with a warning)."""
    out, bad = [], []
    for i, v in enumerate(values):
        if isinstance(v, bytes):
            try:
                out.append(v.decode("utf-8"))
                continue
            except UnicodeDecodeError:
                out.append(v.decode("utf-8", errors="replace"))
                bad.append(i)
                continue
        if not isinstance(v, str):
            raise DataError(f"{name}[{i}]: expected text, got {type(v).__name__}")
        try:
            v.encode("utf-8")
            out.append(v)
        except UnicodeEncodeError:
            out.append(v.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace")
                       if _escapable(v) else v.encode("utf-8", errors="replace").decode("utf-8"))
            bad.append(i)
    if bad:
        warnings.append(f"{name}: {len(bad)} value(s) not valid UTF-8 (rows {bad[:5]}); stored with U+FFFD "
                        "in place of the bad bytes")
    return out


def _escapable(v: str) -> bool:
    try:
        v.encode("utf-8", errors="surrogateescape")
        return True
    except UnicodeEncodeError:
        return False


def _ragged(name: str, values: Any, n: int, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-row sequences as (flat values, lengths)."""
    if n and all(isinstance(v, np.ndarray) and v.ndim == 1 for v in values):  # the fast path: numpy rows
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=n)
        try:
            return np.concatenate(values).astype(dtype, copy=False), lengths
        except (TypeError, ValueError) as exc:
            raise DataError(f"{name}: not sequences of numbers ({exc})") from exc
    parts = []
    for i, v in enumerate(values):
        if hasattr(v, "detach"):
            v = v.detach().cpu().numpy()
        try:
            parts.append(np.asarray(v, dtype=dtype).reshape(-1))
        except (TypeError, ValueError) as exc:
            raise DataError(f"{name}[{i}]: not a sequence of numbers ({exc})") from exc
    lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=n)
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    return flat, lengths


def _list_column(flat: np.ndarray, lengths: np.ndarray, typ: pa.DataType) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(flat, typ))


def _check_lengths(args: dict[str, Any], n: int) -> dict[str, list[Any]]:
    out = {}
    for name, value in args.items():
        if value is None:
            continue
        values = _as_list(name, value)
        if len(values) != n:
            raise DataError(f"{name}: {len(values)} values for {n} rollouts (prompts has {n}); "
                            "give one per rollout")
        out[name] = values
    return out


def build(step: int, prompts: Any, responses: Any, rewards: Any, *, rule: Rule, rank: int, first_idx: dict[str, int],
          pid_cache: dict[str, str],
          reward_terms: dict[str, Any] | None = None, stage: int = 0, policy_version: int | None = None,
          temperature: float | None = None, **optional: Any) -> Built:
    """The rows of one call; raises DataError (naming the argument and row) when it must be refused whole.
    `first_idx` (prompt id -> next idx of this rank's step) is advanced for the rows kept; `pid_cache`
    (prompt text -> id) saves hashing a prompt again in a later step."""
    unknown = set(optional) - set(PER_ROW) - set(PER_TOKEN)
    if unknown:
        raise DataError(f"log_rollouts: unknown argument(s) {sorted(unknown)}; per-rollout arguments are "
                        f"{', '.join(PER_ROW + PER_TOKEN)}")
    prompts_l = _as_list("prompts", prompts)
    n = len(prompts_l)
    lists = _check_lengths({"responses": responses, "rewards": rewards, **optional,
                            **{f"reward_terms[{k!r}]": v for k, v in (reward_terms or {}).items()}}, n)
    warnings: list[str] = []
    text_prompts = _text("prompts", prompts_l, warnings)
    text_responses = _text("responses", lists["responses"], warnings)
    try:
        reward = np.asarray(lists["rewards"], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"rewards: not numbers ({exc})") from exc
    tokens = {name: _ragged(name, lists[name], n, np.float32 if name != "token_ids" else np.int64)
              for name in PER_TOKEN if name in lists}
    lengths = next(iter(tokens.values()))[1] if tokens else None
    for name, (_, ls) in tokens.items():
        bad = np.flatnonzero(ls != lengths)
        if len(bad):
            first = next(iter(tokens))
            raise DataError(f"{name}[{bad[0]}]: {ls[bad[0]]} values but {first}[{bad[0]}] has {lengths[bad[0]]} "  # type: ignore[index]
                            "(one per generated token)")
    keep = np.isfinite(reward)
    if not keep.all():
        dropped = np.flatnonzero(~keep)
        warnings.append(f"rewards: {len(dropped)} NaN or infinite value(s) (rows {dropped[:5].tolist()}); "
                        "those rollouts were not stored")
    cols: dict[str, Any] = {}
    pid = _prompt_ids(text_prompts, pid_cache)
    if "groups" in lists:  # a trainer's own group key: a prompt's further groups get `<id>~k` ids
        pid = _group_ids(pid, [str(g) for g in lists["groups"]])
    idx = np.zeros(n, dtype=np.int64)
    for i in np.flatnonzero(keep):
        key = pid[i]
        idx[i] = first_idx.get(key, rank * RANK_IDX_STRIDE)
        first_idx[key] = idx[i] + 1
    cols["stage"] = pa.array(np.full(n, int(stage), dtype=np.int32))
    cols["prompt_id"] = pa.array(pid.tolist(), pa.string())
    cols["idx"] = pa.array(idx.astype(np.int32))
    cols["response"] = pa.array(text_responses, pa.string())
    cols["reward"] = pa.array(np.where(keep, reward, 0.0).astype(np.float32))
    cols.update(_verdicts(lists, reward, rule, n))
    cols.update(_token_columns(tokens, n))
    if "advantages" in lists:
        cols["advantage"] = pa.array(np.asarray(lists["advantages"], dtype=np.float32))
    if "finish_reasons" in lists:
        cols["finish_reason"] = pa.array([None if v is None else str(v) for v in lists["finish_reasons"]], pa.string())
    if policy_version is not None:
        cols["policy_version"] = pa.array(np.full(n, int(policy_version), dtype=np.int32))
    if temperature is not None:
        cols["temperature"] = pa.array(np.full(n, float(temperature), dtype=np.float32))
    terms = {k: np.asarray(lists[f"reward_terms[{k!r}]"], dtype=np.float64) for k in (reward_terms or {})}
    if terms:
        cols["reward_terms"] = terms_array(terms, n)
    turns: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    if "episodes" in lists:
        cols.update(_episodes(lists["episodes"], pid, idx, int(stage), keep, turns, calls))
    cols["worker"] = pa.array([f"rank-{rank}"] * n, pa.string())
    cols["off_policy"] = pa.array(np.zeros(n, dtype=bool))
    cols["used_in_update"] = pa.array(np.ones(n, dtype=bool))
    table = pa.table(cols)
    table = table if keep.all() else table.filter(pa.array(keep))
    prompts_rows = _prompt_rows(pid, text_prompts, lists.get("answers"), keep)
    return Built(table, prompts_rows, warnings, turns, calls)


def _episodes(episodes: list[Any], pid: np.ndarray, idx: np.ndarray, stage: int, keep: np.ndarray,
              turns: list[dict[str, Any]], calls: list[dict[str, Any]]) -> dict[str, pa.Array]:
    """Validate each rollout's episode (None: a one-turn rollout), add the kept ones' `turns` and
    `tool_calls` rows, and return the rollouts' count columns (`Episode.summary`). DataError naming the row."""
    counts: dict[str, list[int | None]] = {k: [] for k in ("turns", "tool_calls", "tool_errors", "tool_tokens")}
    for i, ep in enumerate(episodes):
        if ep is None:
            for values in counts.values():
                values.append(None)
            continue
        if not isinstance(ep, Episode):
            raise DataError(f"episodes[{i}]: expected a workbench.episodes.Episode or None, got {type(ep).__name__}")
        try:
            t, c = episode_rows(ep, {"stage": stage, "prompt_id": str(pid[i]), "idx": int(idx[i])})
        except DataError as exc:
            raise DataError(f"episodes[{i}]: {exc}") from exc
        if keep[i]:
            turns += t
            calls += c
        for name, value in ep.summary().items():
            counts[name].append(value)
    return {name: pa.array(values, pa.int32()) for name, values in counts.items()}


def _prompt_ids(texts: list[str], cache: dict[str, str]) -> np.ndarray:
    """The importers' prompt ids (`integrations.records.prompt_id`), each text hashed once per run."""
    for t in dict.fromkeys(texts):
        if t not in cache:
            cache[t] = prompt_id(t)
    return np.asarray([cache[t] for t in texts], dtype=object)


def _group_ids(pid: np.ndarray, groups: list[str]) -> np.ndarray:
    rank: dict[tuple[str, str], int] = {}
    per_prompt: dict[str, int] = {}
    out = pid.astype(object).copy()
    for i, (p, g) in enumerate(zip(pid.tolist(), groups)):
        if (p, g) not in rank:
            rank[(p, g)] = per_prompt.get(p, 0)
            per_prompt[p] = rank[(p, g)] + 1
        if rank[(p, g)]:
            out[i] = f"{p}~{rank[(p, g)]}"
    return out


def _verdicts(lists: dict[str, list[Any]], reward: np.ndarray, rule: Rule, n: int) -> dict[str, pa.Array]:
    """`correct`: the caller's verdicts where given, else the run's rule over the reward."""
    if "correct" in lists:
        correct = np.asarray(lists["correct"], dtype=bool)
    else:
        correct = np.asarray(rule(reward), dtype=bool)  # NaN is never correct
    out = {"correct": pa.array(correct)}
    if "verdicts" in lists:
        out["verdict"] = pa.array([None if v is None else str(v) for v in lists["verdicts"]], pa.string())
    else:
        out["verdict"] = pa.array(np.where(correct, "correct", "wrong").tolist(), pa.string())
    return out


def _token_columns(tokens: dict[str, tuple[np.ndarray, np.ndarray]], n: int) -> dict[str, pa.Array]:
    cols: dict[str, pa.Array] = {}
    if not tokens:
        return cols
    lengths = next(iter(tokens.values()))[1]
    cols["length"] = pa.array(lengths.astype(np.int32))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if n else np.zeros(0, dtype=np.int64)
    nonempty = lengths > 0
    if "token_ids" in tokens:
        flat, _ = tokens["token_ids"]
        if len(flat) and (flat.min() < -2**31 or flat.max() >= 2**31):
            raise DataError("token_ids: a token id does not fit a 32-bit integer")
        cols["token_ids"] = _list_column(flat.astype(np.int32), lengths, pa.int32())
    if "token_entropy" in tokens:
        flat, _ = tokens["token_entropy"]
        cols["token_entropy"] = _list_column(flat, lengths, pa.float32())
        sums = np.add.reduceat(flat.astype(np.float64), starts[nonempty]) if nonempty.any() else np.zeros(0)
        maxes = np.maximum.reduceat(flat, starts[nonempty]) if nonempty.any() else np.zeros(0)
        mean, top = np.zeros(n), np.zeros(n)
        mean[nonempty] = sums / lengths[nonempty]
        top[nonempty] = maxes
        cols["entropy_mean"] = pa.array(mean.astype(np.float32))
        cols["entropy_max"] = pa.array(top.astype(np.float32))
    if "token_logprobs" in tokens:
        flat, _ = tokens["token_logprobs"]
        cols["token_logprobs"] = _list_column(flat, lengths, pa.float32())
        sums = np.zeros(n)
        if nonempty.any():
            sums[nonempty] = np.add.reduceat(flat.astype(np.float64), starts[nonempty])
        cols["logprob_sum"] = pa.array(sums.astype(np.float32))
    return cols


def _prompt_rows(pid: np.ndarray, texts: list[str], answers: list[Any] | None, keep: np.ndarray) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    kept = np.flatnonzero(keep)
    firsts: dict[str, int] = {}
    for p, i in zip(pid[kept].tolist(), kept.tolist()):
        firsts.setdefault(p, i)
    for i in firsts.values():
        if pid[i] not in rows:
            row = {"prompt_id": pid[i], "text": texts[i], "split": "train"}
            if answers is not None and answers[i] is not None:
                row["answer"] = str(answers[i])
            rows[pid[i]] = row
    return list(rows.values())


def summary(table: pa.Table, terms: bool = True) -> dict[str, Any]:
    """Step metrics over one step's rollouts (named as the engine's and the importers')."""
    import polars as pl

    frame = pl.from_arrow(table.select([c for c in ("prompt_id", "reward", "correct", "length", "entropy_mean")
                                        if c in table.column_names]))
    assert isinstance(frame, pl.DataFrame)
    n = frame.height
    if n == 0:
        return {"rollout/count": 0}
    groups = frame.group_by("prompt_id").agg(pl.len().alias("n"), pl.col("correct").sum().alias("c"),
                                             (pl.col("reward").n_unique() > 1).alias("signal"))
    m: dict[str, Any] = {"rollout/count": n, "rollout/prompts": groups.height,
                         "rollout/reward_mean": float(frame["reward"].mean()),  # type: ignore[arg-type]
                         "rollout/reward_std": float(frame["reward"].std(ddof=0)),  # type: ignore[arg-type]
                         "rollout/zero_signal_frac": float(1.0 - groups["signal"].mean()),  # type: ignore[operator]
                         "rollout/frac_all_correct": float((groups["c"] == groups["n"]).mean()),  # type: ignore[arg-type]
                         "rollout/frac_all_wrong": float((groups["c"] == 0).mean()),  # type: ignore[arg-type]
                         "rollout/group_size_mean": float(groups["n"].mean())}  # type: ignore[arg-type]
    if "length" in frame.columns:
        m["rollout/tokens_generated"] = int(frame["length"].sum())
        m["rollout/length_mean"] = float(frame["length"].mean())  # type: ignore[arg-type]
    if "entropy_mean" in frame.columns:
        m["rollout/entropy_mean"] = float(frame["entropy_mean"].mean())  # type: ignore[arg-type]
    if terms and "reward_terms" in table.column_names:
        col = table.column("reward_terms").combine_chunks()
        flat = pl.DataFrame({"key": col.keys.to_numpy(zero_copy_only=False),
                             "value": col.items.to_numpy(zero_copy_only=False)})
        for key, mean in flat.group_by("key").agg(pl.col("value").mean()).iter_rows():
            m[METRIC_PREFIX + key] = float(mean)
    return m
