"""The real allocator comparison (`workbench bench allocators` without `--simulate`): the default
organism experiment once per allocator and seed at the same generated-token budget, reporting held-out
pass@1 / pass@8 against generated tokens, the zero-signal fraction, `tokens_to_uniform_final` and
`best_token_saving_vs_uniform`, written to `docs/bench/allocators.json` (+ plot and table).

It needs the training engine; until the engine provides a run entry point this hook refuses with a
clear error, after validating its arguments (so a typo is reported first)."""

from __future__ import annotations

from typing import Any

from workbench.allocators._config import check_int
from workbench.allocators.registry import available_allocators, get_allocator
from workbench.errors import WorkbenchError


def compare(allocators: list[str] | None = None, seeds: int = 3, **options: Any) -> dict[str, Any]:
    """Run the real comparison; returns the JSON object `workbench bench allocators --json` prints."""
    names = allocators or available_allocators()
    for name in names:
        get_allocator(name)
    check_int("bench allocators", "seeds", seeds, 1, 100)
    raise WorkbenchError(
        "the real comparison needs the engine (not wired yet); run `workbench bench allocators --simulate` "
        "for the offline simulator"
    )
