"""What every task hands the engine: prompts with a reference answer, and a verifier's result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Prompt:
    """One verifiable prompt. `id` is stable across runs (the store keys prompts by it)."""

    id: str
    """Stable identifier, unique within the task (e.g. "arith-train-000123" or a data set's id field)."""
    text: str
    """What the model is conditioned on (after any chat template)."""
    answer: str
    """The reference answer the verifier compares against."""
    level: int | None = None
    """Difficulty level, when the task knows it (the synthetic task always does)."""
    split: str = "train"
    """"train" or "eval"."""
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    """Anything else the task or data set carries (JSON-serialisable)."""


@dataclass(frozen=True)
class VerifyResult:
    """A verifier's judgement of one response."""

    reward: float
    """The reward, usually 0.0 or 1.0."""
    verdict: str
    """Short machine-readable verdict: "correct", "wrong", "no_answer", "verifier_error: <reason>", ..."""
    correct: bool | None = None
    """The verifier's judgement of the answer, kept apart from the reward (which may add a format
    bonus or a length penalty). Left out, it is `verdict == "correct"`."""

    def __post_init__(self) -> None:
        if self.correct is None:
            object.__setattr__(self, "correct", self.verdict == "correct")


@runtime_checkable
class Task(Protocol):
    """What the engine needs from a task (see `workbench.tasks.get_task`)."""

    def train_prompts(self) -> list[Prompt]:
        """The train split, in a deterministic order."""
        ...

    def eval_prompts(self) -> list[Prompt]:
        """The held-out eval split, disjoint from the train split."""
        ...

    def verify(self, response: str, prompt: Prompt) -> VerifyResult:
        """Judge one response; never raises (errors become verdict "verifier_error: <reason>")."""
        ...
