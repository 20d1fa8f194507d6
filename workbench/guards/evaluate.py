"""Evaluating a parsed rule (`workbench.guards.rules`) at one step: three-valued, over the step's
metrics, the run's history and the step's rollouts.

A step's rollouts are evaluated as columns (`Rollouts`, `evaluate_rows`: numpy over every rollout at
once, whatever their number); `evaluate` with a `row` is the same rule over one rollout, the plain
reference the columns are tested against (tests/guards/test_rules.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from workbench.guards.rules import (
    ROLLOUT_FIELDS,
    ROLLOUT_FUNCS,
    WINDOW_FUNCS,
    Binary,
    Call,
    Finite,
    Metric,
    Num,
    Unary,
    rollout_predicates,
)


class Rollouts:
    """A step's rollouts as columns: each field of `ROLLOUT_FIELDS` a float array (`known`: where it has a
    value), and each rollout's key (step, stage, prompt_id, idx: what an alert's evidence lists)."""

    def __init__(self, n: int, columns: dict[str, np.ndarray], known: dict[str, np.ndarray] | None = None,
                 keys: dict[str, list[Any]] | None = None) -> None:
        self.n = n
        self.columns = {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}
        self.known = {k: np.asarray(known[k], dtype=bool) if known and k in known else np.ones(n, bool)
                      for k in self.columns}
        self.keys: dict[str, Any] = keys or {}

    @classmethod
    def from_rows(cls, rows: list[dict[str, Any]]) -> "Rollouts":
        """Rows (dicts of rollout fields and keys; a missing or None field is unknown) as columns."""
        columns, known = {}, {}
        for name in ROLLOUT_FIELDS:
            values = [_num(r.get(name)) for r in rows]
            known[name] = np.asarray([v is not None for v in values], dtype=bool)
            columns[name] = np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
        keys = {k: [r.get(k) for r in rows] for k in ("step", "stage", "prompt_id", "idx")}
        return cls(len(rows), columns, known, keys)

    def __len__(self) -> int:
        return self.n

    def row(self, i: int) -> dict[str, float | None]:
        """Rollout `i`'s fields (None: unknown), what `evaluate(..., row=)` reads."""
        return {k: float(v[i]) if self.known[k][i] else None for k, v in self.columns.items()}

    def key(self, i: int) -> dict[str, Any]:
        """Rollout `i`'s key (the key columns are lists or Arrow arrays)."""
        return {k: (v[i].as_py() if hasattr(v[i], "as_py") else v[i]) for k, v in self.keys.items()}


class Context:
    """What a rule reads at one step: the step's metrics, the run's history of each metric (oldest
    first, this step included) and the step's rollouts (`Rollouts`, or rows of `ROLLOUT_FIELDS`)."""

    def __init__(self, metrics: dict[str, Any], history: dict[str, list[float]],
                 rollouts: Rollouts | list[dict[str, Any]] | None = None) -> None:
        self.metrics, self.history = metrics, history
        self.rollouts = rollouts if isinstance(rollouts, Rollouts) else Rollouts.from_rows(list(rollouts or []))


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return None if not isinstance(v, bool) else float(v)
    return float(v)


def evaluate(node: Any, ctx: Context, row: dict[str, float] | None = None) -> Any:
    """The value of `node` (a float, a bool, or None for unknown)."""
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Metric):
        return _num(row.get(node.name)) if row is not None else _num(ctx.metrics.get(node.name))
    if isinstance(node, Finite):
        v = evaluate(node.arg, ctx, row)
        if v is None:
            return None
        return (not math.isfinite(v)) if node.negate else math.isfinite(v)
    if isinstance(node, Unary):
        v = evaluate(node.arg, ctx, row)
        if v is None:
            return None
        return (not v) if node.op == "not" else -v
    if isinstance(node, Binary):
        return _binary(node, ctx, row)
    return _call(node, ctx, row)


def _binary(node: Binary, ctx: Context, row: dict[str, float] | None) -> Any:
    a = evaluate(node.left, ctx, row)
    if node.op in ("and", "or"):
        if a is not None and bool(a) == (node.op == "or"):
            return bool(a)
        b = evaluate(node.right, ctx, row)
        if b is not None and bool(b) == (node.op == "or"):
            return bool(b)
        return None if a is None or b is None else bool(b)
    b = evaluate(node.right, ctx, row)
    if a is None or b is None:
        return None
    a, b = float(a), float(b)
    if node.op == "+":
        return a + b
    if node.op == "-":
        return a - b
    if node.op == "*":
        return a * b
    if node.op == "/":
        return a / b if b != 0 else (math.nan if a == 0 else math.copysign(math.inf, a) * math.copysign(1, b))
    if math.isnan(a) or math.isnan(b):
        return node.op == "!="
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[node.op]


def holds(value: Any) -> bool:
    """A rollout predicate's value holds: known and true (a number: not 0)."""
    return value is not None and bool(value)


def _call(node: Call, ctx: Context, row: dict[str, float] | None) -> Any:
    f, args = node.func, node.args
    if f in ROLLOUT_FUNCS:
        if not ctx.rollouts.n:
            return None
        hits = int(predicate_mask(args[0], ctx.rollouts).sum())
        return hits / ctx.rollouts.n if f == "share" else float(hits)
    if f in WINDOW_FUNCS:
        values = ctx.history.get(args[0].name, [])
        n = int(args[1].value) if len(args) > 1 else 1
        if f == "last":
            return values[-1] if values else None
        if f == "baseline":
            return sum(values[:n]) / n if len(values) >= n else None
        if f == "mean":
            return sum(values[-n:]) / n if len(values) >= n else None
        return values[-1] - values[-1 - n] if len(values) > n else None  # delta
    vals = [evaluate(a, ctx, row) for a in args]
    if any(v is None for v in vals):
        return None
    if f == "abs":
        return abs(float(vals[0]))
    return (min if f == "min" else max)(float(v) for v in vals)


def matching_rollouts(node: Any, ctx: Context) -> list[int]:
    """Indices of the step's rollouts that satisfy any share()/count() predicate of the rule."""
    hit = np.zeros(ctx.rollouts.n, dtype=bool)
    for p in rollout_predicates(node):
        hit |= predicate_mask(p, ctx.rollouts)
    return np.flatnonzero(hit).tolist()


def predicate_mask(pred: Any, rollouts: Rollouts) -> np.ndarray:
    """[n] whether the rollout predicate `pred` holds for each rollout (vectorised `holds(evaluate(...))`)."""
    value, known = evaluate_rows(pred, rollouts)
    return known & (value != 0)  # NaN is true, as bool(nan) is


def evaluate_rows(node: Any, r: Rollouts) -> tuple[np.ndarray, np.ndarray]:
    """A rollout predicate over every rollout at once: (values, known), booleans as 1.0 / 0.0; the same
    three-valued logic as `evaluate` over one row (tests/guards/test_rules.py holds them equal)."""
    n = r.n
    if isinstance(node, Num):
        return np.full(n, node.value), np.ones(n, bool)
    if isinstance(node, Metric):
        return r.columns[node.name], r.known[node.name]
    if isinstance(node, Finite):
        v, k = evaluate_rows(node.arg, r)
        fin = np.isfinite(v)
        return (~fin if node.negate else fin).astype(np.float64), k
    if isinstance(node, Unary):
        v, k = evaluate_rows(node.arg, r)
        return ((v == 0).astype(np.float64) if node.op == "not" else -v), k
    if isinstance(node, Call):  # abs, min, max (rollout and window functions cannot appear here)
        vals = [evaluate_rows(a, r) for a in node.args]
        known = np.logical_and.reduce([k for _, k in vals])
        if node.func == "abs":
            return np.abs(vals[0][0]), known
        (a, _), (b, _) = vals
        pick = (b < a) if node.func == "min" else (b > a)  # Python's min/max: the first unless the second wins
        return np.where(pick, b, a), known
    return _binary_rows(node, r)


def _binary_rows(node: Binary, r: Rollouts) -> tuple[np.ndarray, np.ndarray]:
    a, ka = evaluate_rows(node.left, r)
    b, kb = evaluate_rows(node.right, r)
    if node.op in ("and", "or"):
        ta, tb = a != 0, b != 0
        if node.op == "or":
            decided = (ka & ta) | (kb & tb)  # a known true side makes it true
        else:
            decided = (ka & ~ta) | (kb & ~tb)  # a known false side makes it false
        known = decided | (ka & kb)
        value = np.where(decided, node.op == "or", tb)
        return value.astype(np.float64), known
    known = ka & kb
    with np.errstate(all="ignore"):
        if node.op == "+":
            return a + b, known
        if node.op == "-":
            return a - b, known
        if node.op == "*":
            return a * b, known
        if node.op == "/":
            by_zero = np.where(a == 0, np.nan, np.copysign(np.inf, a) * np.copysign(1.0, b))
            return np.where(b != 0, a / np.where(b != 0, b, 1.0), by_zero), known
        cmp = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
               "!=": np.not_equal}[node.op]
        return cmp(a, b).astype(np.float64), known  # NaN: False, and True for !=, as in `_binary`
