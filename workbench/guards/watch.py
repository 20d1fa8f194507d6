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

from workbench.guards.config import Guard
from workbench.guards.rules import Context, evaluate, matching_rollouts, metric_names, rollout_predicates

MAX_EVIDENCE_ROLLOUTS = 200
"""Most rollouts an alert lists as its evidence per step (the first ones, in generation order)."""


def repeat_frac(text: str) -> float:
    """Share of `text`'s characters taken by its most repeated character, bigram or trigram."""
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


ROLLOUT_COLUMNS = ("step", "stage", "prompt_id", "idx", "response", "length", "reward", "finish_reason",
                   "entropy_mean")
"""The store's rollout columns the rule language reads."""


def rollout_rows(table: Any) -> list[dict[str, Any]]:
    """A step's rollouts (an Arrow table with the store's rollout columns, or a list of dicts) as rows
    of the rule language's rollout fields, keyed by (step, stage, prompt_id, idx)."""
    if table is None:
        return []
    if hasattr(table, "select"):  # an Arrow table: only the columns read (not the per-token lists)
        table = table.select([c for c in ROLLOUT_COLUMNS if c in table.column_names])
    rows = table.to_pylist() if hasattr(table, "to_pylist") else list(table)
    out = []
    for r in rows:
        text = r.get("response") or ""
        out.append(dict(
            step=r.get("step"), stage=r.get("stage", 0), prompt_id=r.get("prompt_id"), idx=r.get("idx", 0),
            length=float(r.get("length") or 0), reward=_f(r.get("reward")),
            truncated=None if r.get("finish_reason") is None else float(r.get("finish_reason") == "length"),
            repeat_frac=repeat_frac(text),
            entropy_mean=_f(r.get("entropy_mean")), chars=float(len(text))))
    return out


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


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

    def step(self, step: int, metrics: dict[str, Any], rollouts: list[dict[str, Any]] | None = None) -> list[Firing]:
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
            st.rollouts[step] = [_key(ctx.rollouts[i]) for i in hits[:MAX_EVIDENCE_ROLLOUTS]]
        if st.fired or len(st.streak) < guard.window:
            return None
        st.fired = True
        steps = st.streak[-guard.window:]
        return Firing(guard, step, steps[0], steps, {str(s): st.values[s] for s in steps},
                      [r for s in steps for r in st.rollouts.get(s, [])])


def _key(r: dict[str, Any]) -> dict[str, Any]:
    return dict(step=r["step"], stage=r["stage"], prompt_id=r["prompt_id"], idx=r["idx"])


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
