"""What the replay reads from a logged run (`workbench.analysis.replay`): the outcomes it draws a
replayed rollout's reward and length from (`Outcomes`: observed, resampled, nearby or prior, see
`SOURCES`), the logged step structure (`LoggedStep`, `logged_steps`) and the logged per-prompt
statistics (`logged_stats`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

from workbench.allocators.base import PromptStats
from workbench.correctness import with_correct
from workbench.errors import DataError

SOURCES = ("observed", "resampled", "nearby", "prior")
"""Where a replayed rollout's outcome came from (see `workbench.analysis.replay`'s docstring)."""


# -- the logged outcomes ---------------------------------------------------------------------------

class Outcomes:
    """Each (step, prompt)'s observed on-policy (reward, length, correct) outcomes, served by seeded
    draws. A row's correctness is its `correct` column where given, else the default rule (see
    `workbench.correctness`; `load_run` fills it with the run's rule)."""

    def __init__(self, rollouts: pl.DataFrame, seed: int,
                 extrapolate: Literal["posterior", "empirical"] = "posterior") -> None:
        if extrapolate not in ("posterior", "empirical"):
            raise DataError(f"replay: extrapolate must be 'posterior' or 'empirical', got {extrapolate!r}")
        self.extrapolate = extrapolate
        self._p: dict[str, float] = {}
        missing = {"step", "prompt_id", "reward"} - set(rollouts.columns)
        if missing:
            raise DataError(f"replay: the rollouts frame lacks column(s) {sorted(missing)}")
        frame = rollouts
        if "off_policy" in frame.columns:
            frame = frame.filter(~pl.col("off_policy").fill_null(False))
        if "length" not in frame.columns:
            frame = frame.with_columns(pl.lit(0).alias("length"))
        # imported runs may carry no token counts (verl and TRL dumps hold text only): count them as 0
        frame = with_correct(frame.with_columns(pl.col("length").cast(pl.Int64).fill_null(0)))
        order = [c for c in ("step", "stage", "prompt_id", "idx") if c in frame.columns]
        frame = frame.sort(order) if order else frame
        self.seed = seed
        self.obs: dict[tuple[int, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.steps_of: dict[str, list[int]] = {}
        grouped = frame.group_by(["step", "prompt_id"], maintain_order=True).agg(
            pl.col("reward").cast(pl.Float64), pl.col("length").cast(pl.Int64).fill_null(0), pl.col("correct"))
        for step, pid, rewards, lengths, oks in grouped.iter_rows():
            self.obs[(int(step), pid)] = (np.asarray(rewards, float), np.asarray(lengths, np.int64),
                                          np.asarray(oks, bool))
            self.steps_of.setdefault(pid, []).append(int(step))
        for steps in self.steps_of.values():
            steps.sort()
        self.mean_length = float(frame["length"].mean() or 0.0) if frame.height else 0.0
        self._cursor: dict[str, tuple[np.ndarray, int]] = {}
        self._rng = np.random.default_rng([seed, 0x0DD])
        self._step = -1

    def start_step(self, step: int) -> None:
        """Forget the step's draws (each step draws afresh from its own observations)."""
        self._step = step
        self._cursor = {}
        self._p = {}
        self._rng = np.random.default_rng([self.seed, step, 0x0DD])

    def source_step(self, step: int, pid: str) -> int | None:
        """The step whose observations serve `pid` at `step`: itself if observed, else the nearest."""
        if (step, pid) in self.obs:
            return step
        steps = self.steps_of.get(pid)
        if not steps:
            return None
        return min(steps, key=lambda s: (abs(s - step), s > step))

    def draw(self, pid: str, n: int, prior: float) -> tuple[list[float], list[int], dict[str, int]]:
        """n outcomes for `pid` at the current step (rewards, lengths), and how many came from each source."""
        rewards, lengths, _, counts = self.draw_judged(pid, n, prior)
        return rewards, lengths, counts

    def draw_judged(self, pid: str, n: int,
                    prior: float) -> tuple[list[float], list[int], list[bool], dict[str, int]]:
        """n outcomes for `pid` at the current step: rewards, lengths, verdicts, and how many came
        from each source. A drawn reward keeps its logged verdict; a binary reward drawn from the
        posterior (rewards that are their verdicts, 1 correct and 0 wrong) is correct at 1."""
        counts = dict.fromkeys(SOURCES, 0)
        src = self.source_step(self._step, pid)
        if src is None:
            drawn = self._rng.random(n) < prior
            counts["prior"] = n
            length = int(round(self.mean_length))
            return drawn.astype(float).tolist(), [length] * n, drawn.tolist(), counts
        rewards, lengths, oks = self.obs[(src, pid)]
        order, used = self._cursor.get(pid) or (self._rng.permutation(len(rewards)), 0)
        fresh = order[used:used + n]
        extra = self._rng.integers(0, len(rewards), size=n - len(fresh))
        self._cursor[pid] = (order, used + len(fresh))
        pick = np.concatenate([fresh, extra]).astype(np.int64)
        if src == self._step:
            counts["observed"], counts["resampled"] = len(fresh), len(extra)
        else:
            counts["nearby"] = n
        out, out_ok = rewards[pick], oks[pick]
        if len(extra) and self.extrapolate == "posterior" and (rewards == oks).all():
            p = self._p.get(pid)
            if p is None:
                c = float(oks.sum())
                p = self._p[pid] = float(self._rng.beta(1.0 + c, 1.0 + len(oks) - c))
            out_ok[len(fresh):] = self._rng.random(len(extra)) < p
            out[len(fresh):] = out_ok[len(fresh):].astype(float)
        return out.tolist(), lengths[pick].tolist(), out_ok.tolist(), counts


# -- the logged step structure ---------------------------------------------------------------------

@dataclass
class LoggedStep:
    step: int
    candidates: list[str]
    """Prompts the run's sampler drew for the step (stage-0 decisions, or statistics without decisions)."""
    drawn: list[str]
    """Prompts the run drew mid-step (first decision at a later stage)."""
    budget_kind: str
    budget: int


def logged_steps(allocations: pl.DataFrame, prompt_stats: pl.DataFrame | None = None) -> list[LoggedStep]:
    """The run's steps as the replay needs them, from frames shaped like `allocations`/`prompt_stats`."""
    need = {"step", "stage", "prompt_id", "budget_kind", "budget"}
    missing = need - set(allocations.columns)
    if missing:
        raise DataError(f"replay: the allocations frame lacks column(s) {sorted(missing)}")
    stats_by_step: dict[int, list[str]] = {}
    if prompt_stats is not None and prompt_stats.height:
        for step, pids in prompt_stats.group_by("step", maintain_order=True).agg("prompt_id").iter_rows():
            stats_by_step[int(step)] = list(pids)
    out: list[LoggedStep] = []
    for (step,), frame in allocations.group_by(["step"], maintain_order=True):
        first = frame.group_by("prompt_id", maintain_order=True).agg(pl.col("stage").min())
        cands = [p for p, s in first.iter_rows() if s == 0]
        drawn = [p for p, s in first.iter_rows() if s > 0]
        seen = set(cands) | set(drawn)
        cands += [p for p in stats_by_step.get(int(step), []) if p not in seen]
        out.append(LoggedStep(int(step), cands, drawn, str(frame["budget_kind"][0]), int(frame["budget"][0])))
    return sorted(out, key=lambda s: s.step)


def logged_stats(prompt_stats: pl.DataFrame | None) -> dict[int, dict[str, PromptStats]]:
    """{step: {prompt: PromptStats after that step}} from a `prompt_stats`-shaped frame."""
    out: dict[int, dict[str, PromptStats]] = {}
    if prompt_stats is None:
        return out
    names = {f.name for f in dataclasses.fields(PromptStats)}
    for row in prompt_stats.iter_rows(named=True):
        kw = {k: v for k, v in row.items() if k in names and v is not None}
        out.setdefault(int(row["step"]), {})[row["prompt_id"]] = PromptStats(**kw)
    return out
