"""The reward in parts: each rollout's terms (the verifier, a format check, DAPO's overlong penalty,
user functions; configured by `workbench.tasks.reward_config`), their weighted sum, and the verifier's
verdict kept apart from the reward.

    scored = score(cfg.rewards, task, prompts, responses, lengths, finished, max_new_tokens=8)
    scored.rewards            # [N] float64: sum of weight x term
    scored.terms              # {name: [N] float64}, unweighted
    scored.results            # the verifier's VerifyResult per rollout (its verdict says correct or not)

Terms travel to the store as one `MAP(VARCHAR, DOUBLE)` per rollout (`terms_array`), and each term's
step mean as the step metric `reward/<name>` (`term_means`). Importers hand their per-function reward
columns over as `term:<name>` columns of the normalised frame (`frame_terms_array`, `frame_term_means`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from workbench.errors import WorkbenchError
from workbench.tasks.base import Prompt, VerifyResult
from workbench.tasks.reward_config import (FormatTerm, FunctionTerm, OverlongTerm, RewardsConfig, Term,
                                          VerifierTerm, max_length_of)
from workbench.tasks.verifiers import load_user_verifier

METRIC_PREFIX = "reward/"
"""Step metric of a term's mean over the step's on-policy rollouts: `reward/<name>`."""
FRAME_PREFIX = "term:"
"""Column prefix of a term in an importer's normalised frame: `term:<name>`."""


@dataclass
class Scored:
    """One stage's rollouts scored."""

    rewards: np.ndarray
    """[N] float64: the reward, sum over terms of weight x value."""
    terms: dict[str, np.ndarray]
    """Term name -> [N] float64 values, unweighted."""
    results: list[VerifyResult]
    """The verifier's result per rollout (reward and verdict)."""

    @property
    def verdicts(self) -> list[str]:
        return [r.verdict for r in self.results]


def overlong_penalty(lengths: np.ndarray, max_length: int, buffer: int) -> np.ndarray:
    """DAPO's soft overlong punishment: 0 up to max_length - buffer tokens, then falling linearly to
    -1 at max_length, and -1 beyond."""
    expected = max_length - buffer
    over = np.asarray(lengths, dtype=np.float64) - expected
    return -np.clip(over / buffer, 0.0, 1.0)


def _function_values(term: FunctionTerm, responses: list[str], prompts: list[Prompt], lengths: np.ndarray,
                     finished: np.ndarray, results: list[VerifyResult]) -> np.ndarray:
    fn = load_user_verifier(term.path, where=f"reward term {term.name!r}")
    out = np.empty(len(responses))
    for i, (resp, prompt) in enumerate(zip(responses, prompts)):
        try:
            value = fn(resp, prompt, length=int(lengths[i]), finished=bool(finished[i]), verdict=results[i].verdict)
        except Exception as exc:  # noqa: BLE001 - named and re-raised: a broken reward must not train silently
            raise WorkbenchError(f"reward term {term.name!r} ({term.path}) raised on prompt {prompt.id!r}: "
                                 f"{type(exc).__name__}: {exc}") from exc
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise WorkbenchError(f"reward term {term.name!r} ({term.path}) returned {value!r:.40} on prompt "
                                 f"{prompt.id!r}, not a finite number")
        out[i] = float(value)
    return out


def term_values(term: Term, responses: list[str], prompts: list[Prompt], lengths: np.ndarray,
                finished: np.ndarray, results: list[VerifyResult], max_new_tokens: int) -> np.ndarray:
    """One term's unweighted value per rollout."""
    if isinstance(term, VerifierTerm):
        return np.asarray([r.reward for r in results], dtype=np.float64)
    if isinstance(term, FormatTerm):
        pat = re.compile(term.pattern)
        test = pat.fullmatch if term.match == "full" else pat.search
        return np.asarray([1.0 if test(r) else 0.0 for r in responses], dtype=np.float64)
    if isinstance(term, OverlongTerm):
        return overlong_penalty(lengths, max_length_of(term, max_new_tokens), term.buffer)
    return _function_values(term, responses, prompts, lengths, finished, results)


def score(cfg: RewardsConfig, task: Any, prompts: list[Prompt], responses: list[str], lengths: Any,
          finished: Any, *, max_new_tokens: int) -> Scored:
    """Verify every response and compute the reward's terms and their weighted sum. The default config
    (the verifier alone, weight 1) gives exactly the verifier's rewards."""
    results = [task.verify(t, p) for t, p in zip(responses, prompts)]
    lengths = np.asarray(lengths, dtype=np.int64)
    finished = np.asarray(finished, dtype=bool)
    terms: dict[str, np.ndarray] = {}
    total = np.zeros(len(responses), dtype=np.float64)
    for term in cfg.parsed():
        values = term_values(term, responses, prompts, lengths, finished, results, max_new_tokens)
        terms[term.name] = values
        total = total + term.weight * values if term.weight != 1.0 else total + values
    return Scored(rewards=total, terms=terms, results=results)


# -- terms in the store ----------------------------------------------------------------------------

def terms_array(terms: dict[str, np.ndarray] | None, n: int) -> pa.Array:
    """The rollouts' `reward_terms` column: one map per row of the terms whose value is not NaN (a row
    with none is null). Built from flat arrays, no per-row Python."""
    names = list(terms or {})
    typ = pa.map_(pa.string(), pa.float64())
    if not names:
        return pa.nulls(n, typ)
    values = np.stack([np.asarray(terms[k], dtype=np.float64) for k in names], axis=1)  # type: ignore[index]
    keep = ~np.isnan(values)
    counts = keep.sum(axis=1)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    keys = np.broadcast_to(np.asarray(names, dtype=object), values.shape)[keep]
    offsets_arr = pa.array(offsets, pa.int32(), mask=np.append(counts == 0, False))
    return pa.MapArray.from_arrays(offsets_arr, pa.array(keys, pa.string()), pa.array(values[keep], pa.float64()))


def term_means(terms: dict[str, np.ndarray] | None, rows: np.ndarray | None = None) -> dict[str, float]:
    """`reward/<name>`: each term's mean over `rows` (a boolean mask; default every row), NaN ignored."""
    out = {}
    for name, values in (terms or {}).items():
        v = np.asarray(values, dtype=np.float64)
        v = v[rows] if rows is not None else v
        v = v[~np.isnan(v)]
        if len(v):
            out[METRIC_PREFIX + name] = float(v.mean())
    return out


def frame_terms(frame: Any) -> dict[str, np.ndarray]:
    """The `term:<name>` columns of an importer's normalised (polars) frame as {name: values}."""
    return {c[len(FRAME_PREFIX):]: frame[c].cast(float).fill_null(float("nan")).to_numpy()
            for c in frame.columns if c.startswith(FRAME_PREFIX)}


def extra_terms(source: Any, reserved: set[str]) -> dict[str, Any]:
    """An importer's numeric extra fields as `term:<name>` Float64 columns: from a polars frame (its
    numeric, non-boolean columns) or from parsed JSON objects (keys whose values are all numbers or
    missing), leaving out `reserved` names (the reward itself, the step, ...)."""
    import polars as pl

    if isinstance(source, pl.DataFrame):
        return {c if c.startswith(FRAME_PREFIX) else FRAME_PREFIX + c: source[c].cast(pl.Float64)
                for c, t in source.schema.items() if c not in reserved and t.is_numeric()}
    keys = dict.fromkeys(k for o in source for k in o if k not in reserved)
    out = {}
    for k in keys:
        values = [o.get(k) for o in source]
        if all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values):
            out[FRAME_PREFIX + k] = pl.Series(values, dtype=pl.Float64)
    return out
