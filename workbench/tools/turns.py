"""One round of tool calls for a batch of episodes: parse each row's decoded text, run the calls
that can run (at once, in the sandbox), and say what each row's model reads next and whether its
episode goes on. This is the piece the engine calls each time its rows stop at a call.

    turns = run_round(box, texts, calls_made, config)
    for row, turn in enumerate(turns):
        if turn.result is not None:                    # append config's syntax.format_result(turn.result)
            ...
        if not turn.more:                              # the episode is over
            ...

1. A row whose text holds no call (kind none) gets no result: its episode has answered.
2. A malformed, unterminated or unknown-tool call gets its error result, and the episode goes on (the
   model may correct itself), but it counts as a call: a model that only emits broken calls still
   stops at `max_calls`.
3. A row that already made `config.max_calls` calls gets a too_many_calls result and its episode
   ends, whatever the text holds: a model that never stops calling stops here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from workbench.tools.base import ToolResult
from workbench.tools.config import ToolsConfig
from workbench.tools.parsers import ParsedCall, parse
from workbench.tools.sandbox import Sandbox


@dataclass(frozen=True)
class CallOutcome:
    """What one row gets after its text stopped."""

    parsed: ParsedCall
    result: ToolResult | None
    """What the model reads next (None: no call, the episode has answered)."""
    more: bool
    """Whether the episode goes on (decoding resumes after the result)."""


def run_round(box: Sandbox, texts: Sequence[str], calls_made: Sequence[int], config: ToolsConfig) -> list[CallOutcome]:
    """Each row's CallOutcome (module docstring); the calls that run, run at once."""
    if len(texts) != len(calls_made):
        raise ValueError(f"run_round: {len(texts)} texts but {len(calls_made)} call counts")
    cut = config.limits.max_result_chars
    parsed = [parse(text, config.syntax, config.enabled) for text in texts]
    turns: list[CallOutcome | None] = [None] * len(texts)
    runnable = []
    for row, (p, made) in enumerate(zip(parsed, calls_made)):
        if p.kind == "none":
            turns[row] = CallOutcome(p, None, False)
        elif made >= config.max_calls:
            turns[row] = CallOutcome(p, ToolResult.failure("too_many_calls", f"no more tool calls: this episode made "
                                                    f"its {config.max_calls}", max_chars=cut), False)
        elif p.kind != "call":
            turns[row] = CallOutcome(p, p.failure(cut), True)
        else:
            runnable.append(row)
    futures = [box.submit(parsed[row].name or "", parsed[row].arguments, config.limits) for row in runnable]
    for row, future in zip(runnable, futures):
        turns[row] = CallOutcome(parsed[row], box.wait(future, config.limits), True)
    return [t for t in turns if t is not None]
