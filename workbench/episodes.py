"""The episode format: one rollout that is a conversation of turns, some of them tool calls and results.

An episode is one `rollouts` row (its prompt, group, reward, advantage) plus its turns: system / user /
assistant / tool messages in order, each with its text and token ids. Assistant turns keep the per-token
entropy and log-probabilities the store keeps for single-turn responses; each tool call keeps its name,
arguments, result, error (or none) and seconds; the loss mask says which tokens the policy is trained on
(never a tool result, never a template token the model did not sample). A parent pointer per turn lets a
branched group (ARPO / AEPO branches) be a tree of turns, as verifiers' message graph is; a turn shared by
two branches is stored once, in the episode that first generated it, and a branch's turns point at it.

This module is the format only (pure data, validation, rows to and from the store's `turns` and
`tool_calls` tables); `workbench/store/schema.py` owns the tables and `workbench/store/episode_reader.py`
reads them. The engine, the logging SDK, the importers and export all speak it:

    ep = Episode([Turn("user", "What is 37*48?"),
                  Turn("assistant", "<calc>37*48</calc>", token_ids=[...], entropy=[...],
                       tool_calls=[ToolCall("calculator", "37*48", "1776", seconds=0.004)]),
                  Turn("tool", "1776", token_ids=[...]),
                  Turn("assistant", "1776", token_ids=[...], entropy=[...], finish_reason="stop")])
    ep.validate()            # DataError naming the turn and field on bad input
    ep.loss_mask()           # one flag per token of every turn after the prompt: True where trained on
    turns, calls = episode_rows(ep)   # rows of `turns` and `tool_calls` (the rollout's key is added by the caller)

A single-turn rollout reads as a two-turn episode (the prompt as a user turn, the response as the
assistant's), so every reader can treat all rollouts as episodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import DataError

ROLES = ("system", "user", "assistant", "tool")
"""The roles a turn may have."""

TOOL_ERRORS = (
    "syntax",          # the call's code or expression does not parse
    "refused",         # it uses something the tool does not allow (a name, an import, a file, the network)
    "tool_error",      # the tool said no (a bad argument, a division by zero, a number too large)
    "raised",          # the tool raised another exception
    "timeout",         # it ran past its wall-clock limit and was killed
    "cpu",             # it ran past its CPU-time limit and was killed
    "memory",          # it ran past its memory limit
    "output",          # it produced more output than the sandbox reads
    "non_text",        # the tool returned something other than a string
    "non_utf8",        # its text (or the call's) cannot be encoded as UTF-8
    "crashed",         # its process died without a result (a signal), or the sandbox itself failed
    "unknown_tool",    # the call names no registered tool
    "malformed",       # the call's text is not a valid call (bad JSON, no name, arguments not a table)
    "unterminated",    # the text ends inside a call
    "too_many_calls",  # the episode already made its allowed number of calls
)
"""Every way a tool call can fail (`tool_calls.error`; `workbench/tools` reports the same kinds). The model
sees each as the call's result; none stops a run."""

FINISH_REASONS = ("stop", "length", "turns", "tool_calls", "model_tokens", "total_tokens", "error")
"""Why an episode (its last assistant turn) ended: the model stopped, hit `max_new_tokens` in a turn, or
one of the episode's limits ended it (turns, tool calls, model tokens, total tokens)."""


@dataclass
class ToolCall:
    """One tool call an assistant turn made, with its result as the model saw it."""

    name: str
    """The tool's name as the model wrote it (an unknown name is kept, with error `unknown_tool`)."""
    arguments: str
    """The call's arguments as text (a calculator expression, or JSON for a named-argument tool)."""
    result: str = ""
    """The text returned to the model (truncated to the tool's limit; an error's message on failure)."""
    error: str | None = None
    """None when the call succeeded, else its kind (one of TOOL_ERRORS)."""
    seconds: float = 0.0
    """Wall seconds the call took, sandbox included."""
    truncated: bool = False
    """The result was cut to the tool's `max_result_chars`."""


@dataclass
class Turn:
    """One message of an episode, with its tokens."""

    role: str
    """system, user, assistant or tool."""
    text: str
    """The message's text (without the chat template's markers)."""
    token_ids: list[int] = field(default_factory=list)
    """The turn's token ids as the model saw them (template tokens included where the backend adds them)."""
    mask: list[bool] | None = None
    """Per token: True where the policy is trained on it. None means the role's default: every token of an
    assistant turn, none of any other turn. Never True on a tool turn."""
    entropy: list[float] | None = None
    """Assistant turns: entropy (nats) of the sampling distribution at each token; None elsewhere."""
    logprobs: list[float] | None = None
    """Assistant turns: the behaviour policy's log-probability of each token (nats), where logged."""
    parent: int | None = -1
    """Index of the turn this one follows in the episode's tree; -1 means the previous turn (a plain
    conversation), None a root. Branches of a group point into the episode that generated the shared turns."""
    finish_reason: str | None = None
    """Assistant turns: why decoding of this turn stopped (stop, length, or a tool call: `tool_call`)."""
    started_s: float | None = None
    """Seconds from the episode's start to this turn's first work (generation or tool), for its time lane."""
    seconds: float | None = None
    """Seconds this turn took: decoding for an assistant turn, the tool calls for a tool turn."""
    waited_s: float | None = None
    """Seconds the episode waited for the rest of its batch before this turn (batched decoding)."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Assistant turns: the calls it made, in order; their results follow as tool turns."""

    def trained(self, in_prompt: bool = False) -> list[bool]:
        """The turn's loss mask, the default filled in: every token of an assistant turn after the
        prompt, none of any other turn."""
        if self.mask is not None:
            return [bool(m) for m in self.mask]
        return [self.role == "assistant" and not in_prompt] * len(self.token_ids)


@dataclass
class Episode:
    """One rollout as a conversation. `turns[:prompt_turns]` are the prompt (system / user messages the
    task gave); the turns after it are the response: the model's turns and the tools' results."""

    turns: list[Turn]
    prompt_turns: int = 1
    """How many leading turns are the prompt (never trained on)."""

    def validate(self) -> Episode:
        """Check roles, parents, array lengths and the mask; DataError naming the turn and field."""
        if not self.turns:
            raise DataError("episode: no turns")
        if not 0 <= self.prompt_turns <= len(self.turns):
            raise DataError(f"episode.prompt_turns = {self.prompt_turns}: must be within 0..{len(self.turns)}")
        for i, t in enumerate(self.turns):
            where = f"episode turn {i}"
            if t.role not in ROLES:
                raise DataError(f"{where}.role = {t.role!r}: must be one of {list(ROLES)}")
            if not isinstance(t.text, str):
                raise DataError(f"{where}.text: expected text, got {type(t.text).__name__}")
            n = len(t.token_ids)
            for name in ("mask", "entropy", "logprobs"):
                values = getattr(t, name)
                if values is not None and len(values) != n:
                    raise DataError(f"{where}.{name}: {len(values)} values for {n} token_ids")
            for name in ("entropy", "logprobs"):
                values = getattr(t, name)
                if values is not None and t.role != "assistant":
                    raise DataError(f"{where}.{name}: only assistant turns carry {name} (this one is {t.role})")
            if t.parent is not None and t.parent != -1 and not 0 <= t.parent < i:
                raise DataError(f"{where}.parent = {t.parent}: must point at an earlier turn (0..{i - 1}), "
                                "-1 for the previous turn or None for a root")
            if any(t.trained(i < self.prompt_turns)) and (t.role != "assistant" or i < self.prompt_turns):
                raise DataError(f"{where}.mask: a {t.role} turn {'of the prompt ' if i < self.prompt_turns else ''}"
                                "is never trained on (only sampled assistant tokens are)")
            if t.tool_calls and t.role != "assistant":
                raise DataError(f"{where}.tool_calls: only assistant turns make tool calls")
            for k, c in enumerate(t.tool_calls):
                if c.error is not None and c.error not in TOOL_ERRORS:
                    raise DataError(f"{where}.tool_calls[{k}].error = {c.error!r}: must be None or one of "
                                    f"{list(TOOL_ERRORS)}")
                if not math.isfinite(float(c.seconds)) or c.seconds < 0:
                    raise DataError(f"{where}.tool_calls[{k}].seconds = {c.seconds!r}: must be a finite "
                                    "number >= 0")
        return self

    def parents(self) -> list[int | None]:
        """Each turn's parent index, -1 resolved to the previous turn."""
        return [(i - 1 if i > 0 else None) if t.parent == -1 else t.parent for i, t in enumerate(self.turns)]

    @property
    def response_turns(self) -> list[Turn]:
        return self.turns[self.prompt_turns:]

    def loss_mask(self) -> list[bool]:
        """The mask over the response's tokens in order (every turn after the prompt, tool results
        included as False): what the loss multiplies each token's term by."""
        return [m for t in self.response_turns for m in t.trained()]

    def response_token_ids(self) -> list[int]:
        return [tok for t in self.response_turns for tok in t.token_ids]

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [c for t in self.turns for c in t.tool_calls]

    @property
    def model_tokens(self) -> int:
        """Tokens the model sampled (assistant turns after the prompt)."""
        return sum(len(t.token_ids) for t in self.response_turns if t.role == "assistant")

    @property
    def tool_tokens(self) -> int:
        """Tokens of tool results (they count toward context, never toward the model-token budget)."""
        return sum(len(t.token_ids) for t in self.response_turns if t.role == "tool")

    def summary(self) -> dict[str, int]:
        """The counts the `rollouts` row keeps beside the turns (see docs/store.md)."""
        calls = self.tool_calls
        return {"turns": len(self.turns), "tool_calls": len(calls),
                "tool_errors": sum(c.error is not None for c in calls), "tool_tokens": self.tool_tokens}


def single_turn(prompt: str, response: str, *, prompt_ids: list[int] | None = None,
                token_ids: list[int] | None = None, entropy: list[float] | None = None,
                logprobs: list[float] | None = None, finish_reason: str | None = None) -> Episode:
    """A single-turn rollout as a two-turn episode: the prompt as a user turn, the response as the
    assistant's, every response token trained on."""
    return Episode([Turn("user", prompt, token_ids=list(prompt_ids or [])),
                    Turn("assistant", response, token_ids=list(token_ids or []), entropy=entropy,
                         logprobs=logprobs, finish_reason=finish_reason)])


def _floats(values: list[float] | None) -> list[float] | None:
    return None if values is None else [float(v) for v in values]


def episode_rows(episode: Episode, key: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The episode's rows of the store's `turns` and `tool_calls` tables (validated first). `key` (the
    rollout's stage, prompt_id, idx, and run_id / step where the caller has them) is copied into every row."""
    episode.validate()
    key = dict(key or {})
    parents = episode.parents()
    turns, calls = [], []
    for i, t in enumerate(episode.turns):
        turns.append({**key, "turn": i, "parent_turn": parents[i], "role": t.role, "text": t.text,
                      "token_ids": [int(x) for x in t.token_ids],
                      "loss_mask": None if t.mask is None else [bool(m) for m in t.mask],
                      "token_entropy": _floats(t.entropy), "token_logprobs": _floats(t.logprobs),
                      "prompt": i < episode.prompt_turns, "finish_reason": t.finish_reason,
                      "started_s": t.started_s, "seconds": t.seconds, "waited_s": t.waited_s})
        for k, c in enumerate(t.tool_calls):
            calls.append({**key, "turn": i, "call": k, "name": c.name, "arguments": c.arguments,
                          "result": c.result, "error": c.error, "seconds": float(c.seconds),
                          "truncated": bool(c.truncated)})
    return turns, calls


def episode_from_rows(turns: list[dict[str, Any]], calls: list[dict[str, Any]]) -> Episode:
    """The inverse of `episode_rows`: an Episode from its rows (any order; sorted by turn and call)."""
    by_turn: dict[int, list[ToolCall]] = {}
    for c in sorted(calls, key=lambda c: (c["turn"], c["call"])):
        by_turn.setdefault(int(c["turn"]), []).append(ToolCall(
            name=c["name"], arguments=c["arguments"], result=c["result"] or "", error=c["error"],
            seconds=float(c["seconds"] or 0.0), truncated=bool(c["truncated"])))
    out: list[Turn] = []
    prompt_turns = 0
    for row in sorted(turns, key=lambda r: r["turn"]):
        i = int(row["turn"])
        parent = row["parent_turn"]
        out.append(Turn(role=row["role"], text=row["text"] or "", token_ids=list(row["token_ids"] or []),
                        mask=None if row["loss_mask"] is None else [bool(m) for m in row["loss_mask"]],
                        entropy=_floats(row["token_entropy"]), logprobs=_floats(row["token_logprobs"]),
                        parent=-1 if (parent is None and i == 0) or parent == i - 1 else parent,
                        finish_reason=row["finish_reason"], started_s=row["started_s"], seconds=row["seconds"],
                        waited_s=row["waited_s"], tool_calls=by_turn.get(i, [])))
        prompt_turns += bool(row["prompt"])
    return Episode(out, prompt_turns=prompt_turns)
