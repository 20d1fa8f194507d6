"""Evaluating a run's guards step by step: the metric history, the window of each guard, and the
evidence of a firing. Pure: no store, no engine (the engine's hook and the import watcher call it).

A guard fires once per streak: when its rule has held for `window` consecutive steps; it is armed
again after a step where the rule does not hold. A step where the rule is unknown (a metric not
recorded yet) neither extends nor breaks a streak.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from workbench.guards.config import Guard
from workbench.guards.evaluate import Context, Rollouts, evaluate, matching_rollouts
from workbench.guards.rules import metric_names, rollout_predicates

MAX_EVIDENCE_ROLLOUTS = 200
"""Most rollouts an alert lists as its evidence per step (the first ones, in generation order)."""

REPEAT_WINDOW = 64
"""`repeat_frac` reads a response's last this many characters (all of a shorter one): a loop of a
character, a bigram or a trigram shows at the end of a response, and the cost per rollout stays the
same whatever its length."""


def repeat_frac(text: str, window: int = REPEAT_WINDOW) -> float:
    """Share of the characters of `text`'s last `window` taken by its most repeated character, bigram or
    trigram. The plain reference of `repeat_fracs` (one response, a Counter per n-gram size)."""
    text = text[-window:] if window else text
    n = len(text)
    if n == 0:
        return 0.0
    best = 0.0
    for k in (1, 2, 3):
        if n < 2 * k:
            break
        count = Counter(text[i:i + k] for i in range(0, n - k + 1)).most_common(1)[0][1]
        if k == 1 or count >= 2:  # an n-gram seen once repeats nothing
            best = max(best, min(1.0, count * k / n))
    return best


def repeat_fracs(texts: list[str] | pa.Array | pa.ChunkedArray, window: int = REPEAT_WINDOW) -> np.ndarray:
    """`repeat_frac` of every text at once (a list, or an Arrow string column: null is ""). Each text's
    tail becomes a row of small integers (its characters ranked in the batch's own alphabet), each
    n-gram one integer (32 bits while the alphabet's cube fits), each row sorted, and its longest run of
    equal n-grams counted."""
    codes, lens = _tail_codes(texts, window)
    n = len(lens)
    out = np.zeros(n)
    width = codes.shape[1]
    if width < 2:
        return out
    present = np.zeros(int(codes.max()) + 1, dtype=bool)
    present[codes] = True
    rank = np.cumsum(present, dtype=np.int32) - 1
    alphabet = int(rank[-1]) + 1
    dense = rank[codes].view(np.uint32)  # [n, width], each character's rank in the batch's alphabet
    for k in (1, 2, 3):
        m = width - k + 1
        if m < 1:
            break
        count = _longest_runs(dense, lens, k, m, alphabet)
        ok = (lens >= 2 * k) & ((k == 1) | (count >= 2))
        out = np.where(ok, np.maximum(out, np.minimum(1.0, count * k / np.maximum(lens, 1))), out)
    return out


def _tail_codes(texts: list[str] | pa.Array | pa.ChunkedArray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """The code points of each text's last `window` characters as a [n, width] array (padded with 0),
    and each tail's length: an Arrow column of ASCII text straight from its bytes, anything else through
    Python's UTF-32."""
    if isinstance(texts, (pa.Array, pa.ChunkedArray)):
        col = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
        col = pc.fill_null(col, "")
        if window and len(col) and pc.all(pc.string_is_ascii(col)).as_py():  # one byte a character
            tails = pc.binary_slice(col.cast(pa.large_binary()), -window)
            offsets = np.frombuffer(tails.buffers()[1], dtype=np.int64)[tails.offset:tails.offset + len(tails) + 1]
            data = tails.buffers()[2]
            lens = np.diff(offsets)
            width = int(lens.max())
            if data is None or width == 0:
                return np.zeros((len(lens), width), dtype=np.uint8), lens
            flat = np.frombuffer(data, dtype=np.uint8)
            at = offsets[:-1, None] + np.arange(width)[None, :]
            inside = np.arange(width)[None, :] < lens[:, None]
            return np.where(inside, flat[np.minimum(at, len(flat) - 1)], 0).astype(np.uint8), lens
        texts = col.to_pylist()
    tails = [(t or "")[-window:] if window else (t or "") for t in texts]
    n = len(tails)
    lens = np.fromiter(map(len, tails), dtype=np.int64, count=n)
    width = int(lens.max()) if n else 0
    joined = "".join(t.ljust(width, "\0") for t in tails)
    if joined.isascii():
        return np.frombuffer(joined.encode("ascii"), dtype=np.uint8).reshape(n, width), lens
    return np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).reshape(n, width), lens


def _longest_runs(dense: np.ndarray, lens: np.ndarray, k: int, m: int, alphabet: int) -> np.ndarray:
    """[n] the count of each row's most frequent k-gram among those wholly inside its text."""
    n = len(dense)
    pad = alphabet ** k  # the n-grams that run past a text's end: one value, never counted
    dtype = np.uint32 if pad < 2 ** 32 else np.uint64  # numpy sorts 32-bit keys fastest (SIMD)
    gram = dense[:, :m].astype(dtype)
    for j in range(1, k):
        gram = gram * dtype(alphabet) + dense[:, j:j + m].astype(dtype)
    gram[np.arange(m)[None, :] > (lens - k)[:, None]] = pad
    gram.sort(axis=1)
    pos = np.arange(m, dtype=np.int32)
    starts = np.empty((n, m), dtype=np.int32)  # where each position's run of equal n-grams began
    starts[:, 0] = 0
    np.multiply(gram[:, 1:] != gram[:, :-1], pos[1:], out=starts[:, 1:])
    np.maximum.accumulate(starts, axis=1, out=starts)
    run = pos - starts + 1  # the run's length so far
    run[gram == pad] = 0
    return run.max(axis=1)


ROLLOUT_COLUMNS = ("step", "stage", "prompt_id", "idx", "response", "length", "reward", "finish_reason",
                   "entropy_mean")
"""The store's rollout columns the rule language reads."""


def rollout_rows(table: Any, step: int | None = None) -> Rollouts:
    """A step's rollouts (an Arrow table with the store's rollout columns, or a list of dicts) as the
    rule language's rollout fields (`Rollouts`, columns), keyed by (step, stage, prompt_id, idx); `step`
    fills the key's step where the table has none."""
    if table is None:
        return Rollouts(0, {})
    if not hasattr(table, "select"):
        table = pa.Table.from_pylist(list(table)) if len(table) else pa.table({})
    table = table.select([c for c in ROLLOUT_COLUMNS if c in table.column_names])  # not the per-token lists
    n = table.num_rows

    def col(name: str) -> tuple[np.ndarray, np.ndarray]:
        if name not in table.column_names:
            return np.full(n, np.nan), np.zeros(n, dtype=bool)
        c = table.column(name)
        known = ~np.asarray(c.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        return np.asarray(c.cast(pa.float64()).fill_null(np.nan).to_numpy(), dtype=np.float64), known

    texts = table.column("response") if "response" in table.column_names else pa.nulls(n, pa.string())
    length, has_length = col("length")
    reward, has_reward = col("reward")
    entropy, has_entropy = col("entropy_mean")
    finish = table.column("finish_reason") if "finish_reason" in table.column_names else pa.nulls(n, pa.string())
    truncated = np.asarray(pc.equal(finish, "length").fill_null(False).to_numpy(zero_copy_only=False), bool)
    chars = np.asarray(pc.fill_null(pc.utf8_length(texts), 0).to_numpy(zero_copy_only=False), dtype=np.float64)
    columns = dict(length=np.where(has_length, length, 0.0), reward=reward, truncated=truncated.astype(np.float64),
                   repeat_frac=repeat_fracs(texts), entropy_mean=entropy, chars=chars)
    known = dict(reward=has_reward, entropy_mean=has_entropy,
                 truncated=~np.asarray(finish.is_null().to_numpy(zero_copy_only=False), dtype=bool))

    def keys(name: str, default: Any) -> Any:  # read only for the rollouts an alert lists
        return table.column(name) if name in table.column_names else pa.array([default] * n)

    return Rollouts(n, columns, known, dict(step=pa.array([step] * n) if step is not None else keys("step", None),
                                            stage=keys("stage", 0), prompt_id=keys("prompt_id", None),
                                            idx=keys("idx", 0)))


@dataclass
class Firing:
    """A guard whose rule held for its window at `step`: what the alert records."""

    guard: Guard
    step: int
    first_step: int
    steps: list[int]
    values: dict[str, Any]
    rollouts: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _State:
    streak: list[int] = field(default_factory=list)
    values: dict[int, dict[str, Any]] = field(default_factory=dict)
    rollouts: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    fired: bool = False


class Watch:
    """The guards of one run and the history they read. `step(...)` returns the guards that fire."""

    def __init__(self, guards: dict[str, Guard]) -> None:
        self.guards = dict(guards)
        self.history: dict[int, dict[str, float]] = {}
        self.state: dict[str, _State] = {name: _State() for name in self.guards}
        self._series: dict[str, list[float]] | None = None
        """Each metric's recorded values in step order (what the window functions read)."""

    def set_guard(self, guard: Guard) -> None:
        self.guards[guard.name] = guard
        self.state[guard.name] = _State()

    def remove_guard(self, name: str) -> None:
        self.guards.pop(name, None)
        self.state.pop(name, None)

    def load_history(self, steps: list[tuple[int, dict[str, Any]]]) -> None:
        """Metrics of steps recorded before this process watched the run (a resumed run)."""
        for step, metrics in steps:
            self.history[int(step)] = _numeric(metrics)
        self._series = None

    def rewind(self, step: int) -> None:
        """Forget steps after `step` (a rollback or resume regenerates them) and every streak."""
        self.history = {s: m for s, m in self.history.items() if s <= step}
        self._series = None
        self.state = {name: _State() for name in self.guards}

    def last_step(self) -> int:
        return max(self.history, default=0)

    def step(self, step: int, metrics: dict[str, Any], rollouts: Rollouts | None = None) -> list[Firing]:
        if step <= self.last_step():
            self.rewind(step - 1)
        self.history[step] = _numeric(metrics)
        if self._series is None:  # rebuilt after a rewind or a load, else extended by one step
            self._series = {}
            for s in sorted(self.history)[:-1]:
                for k, v in self.history[s].items():
                    self._series.setdefault(k, []).append(v)
        for k, v in self.history[step].items():
            self._series.setdefault(k, []).append(v)
        ctx = Context(self.history[step], self._series, rollouts)
        fired = []
        for name, guard in self.guards.items():
            f = self._one(guard, self.state[name], ctx, step)
            if f is not None:
                fired.append(f)
        return fired

    def _one(self, guard: Guard, st: _State, ctx: Context, step: int) -> Firing | None:
        tree = guard.tree  # type: ignore[attr-defined]
        verdict = evaluate(tree, ctx)
        if verdict is None:
            return None
        if not verdict:
            st.streak, st.values, st.rollouts, st.fired = [], {}, {}, False
            return None
        st.streak.append(step)
        st.values[step] = {m: ctx.metrics.get(m, (ctx.history.get(m) or [None])[-1])  # else its latest value
                           for m in sorted(metric_names(tree))}
        if ctx.rollouts and rollout_predicates(tree):
            hits = matching_rollouts(tree, ctx)
            st.values[step].update(rollouts=len(ctx.rollouts), matched=len(hits))
            st.rollouts[step] = [ctx.rollouts.key(i) for i in hits[:MAX_EVIDENCE_ROLLOUTS]]
        if st.fired or len(st.streak) < guard.window:
            return None
        st.fired = True
        steps = st.streak[-guard.window:]
        return Firing(guard, step, steps[0], steps, {str(s): st.values[s] for s in steps},
                      [r for s in steps for r in st.rollouts.get(s, [])])


def _numeric(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in (metrics or {}).items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        out[k] = float(v)
    return out


def jsonable(values: Any) -> Any:
    """Values for a JSON column: non-finite floats as strings ("nan", "inf")."""
    if isinstance(values, dict):
        return {k: jsonable(v) for k, v in values.items()}
    if isinstance(values, list):
        return [jsonable(v) for v in values]
    if isinstance(values, float) and not math.isfinite(values):
        return str(values)
    return values


# -- what the store keeps of a firing (the engine and the import watcher both write it) ----------

def alert_message(f: Firing) -> str:
    """One line saying what fired, where, on which values."""
    g = f.guard
    span = f"step {f.step}" if f.first_step == f.step else f"steps {f.first_step}-{f.step}"
    vals = f.values.get(str(f.step), {})
    shown = ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}" for k, v in vals.items())
    return f"guard {g.name!r} fired at {span}: {g.rule}" + (f" ({shown})" if shown else "")


def alert_row(f: Firing, *, status: str = "open", outcome: str | None = None) -> dict[str, Any]:
    g = f.guard
    return dict(guard=g.name, rule=g.rule, window_steps=g.window, action=g.action, first_step=f.first_step,
                step=f.step, evidence=jsonable(f.values), message=alert_message(f), hint=g.hint or None,
                status=status, outcome=outcome)


def metrics_map(m: Any) -> dict[str, Any]:
    """A steps row's `metrics` as a dict (the store returns a MAP as a dict or as key/value pairs)."""
    if isinstance(m, dict):
        return m
    return {kv["key"]: kv["value"] for kv in m or []}
