"""Kill points: named places where a process kills itself on purpose, to prove crash safety.

    WORKBENCH_FAULT=commit:3 workbench resume RUN    # SIGKILL at the 3rd store commit of a step batch

`fault_point(name)` is called at the risky moments of a run (the points are listed in `POINTS`).
When the environment variable `WORKBENCH_FAULT` names the point with a count `k`
(`name:k`, several separated by commas), the process sends itself SIGKILL the k-th time it reaches
that point: no exception, no `finally`, no flush, exactly like a power cut or the OOM killer.
Without the variable a call costs one lookup in an empty dict.

The module sits at the top of the package and imports nothing of it, so the store (commit) and the
engine (everything else) can both call it without the store depending on the engine.
`workbench bench chaos` drives it (see `benchmarks/chaos.py` and docs/reliability.md).
"""

from __future__ import annotations

import os
import signal

ENV = "WORKBENCH_FAULT"
"""The environment variable naming the kill points armed in this process."""

POINTS = {
    "generate": "inside a rollout stage, after the batch is generated and before it is scored",
    "update": "in the policy update, between the backward pass and the optimiser step",
    "commit": "inside the store transaction of a step batch, after its rows are inserted, before COMMIT",
    "checkpoint": "between writing a checkpoint to its temporary name and renaming it into place",
    "eval": "after an evaluation has generated and scored its samples, before they are handed on",
    "control": "while a control command is applied: the engine's setting changed, its outcome not yet stored",
    "tool": "mid-episode: a tool call has run in the sandbox, its result not yet read by the model",
}
"""Every kill point and where it sits."""


def parse(spec: str | None) -> dict[str, int]:
    """`"commit:3,generate:1"` -> `{"commit": 3, "generate": 1}`; a bad spec raises ValueError
    naming the variable and the part at fault."""
    out: dict[str, int] = {}
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, count = part.partition(":")
        name = name.strip()
        if name not in POINTS:
            raise ValueError(f"{ENV}: unknown kill point {name!r} in {part!r} (points: {', '.join(POINTS)})")
        try:
            k = int(count) if sep else 1
        except ValueError:
            raise ValueError(f"{ENV}: {part!r}: the count after ':' must be an integer >= 1") from None
        if k < 1:
            raise ValueError(f"{ENV}: {part!r}: the count after ':' must be an integer >= 1")
        out[name] = k
    return out


_ARMED: dict[str, int] = parse(os.environ.get(ENV))
_SEEN: dict[str, int] = {}


def arm(spec: str | None) -> None:
    """Re-read a spec (tests; a process normally takes it from its environment at import)."""
    global _ARMED
    _ARMED = parse(spec)
    _SEEN.clear()


def reached(name: str) -> int:
    """How many times this process has passed the armed point `name` (0 when it is not armed)."""
    return _SEEN.get(name, 0)


def fault_point(name: str) -> None:
    """Kill this process with SIGKILL if `name` is armed and reached for the armed count."""
    if name in _ARMED:
        n = _SEEN[name] = _SEEN.get(name, 0) + 1
        if n == _ARMED[name]:
            os.kill(os.getpid(), signal.SIGKILL)
