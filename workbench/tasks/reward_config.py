"""The `[rewards]` section of a run config: the reward as a weighted sum of named terms.

    [[rewards.terms]]
    kind = "verifier"            # the task verifier's reward
    weight = 1.0
    [[rewards.terms]]
    kind = "overlong"            # DAPO's soft overlong punishment
    buffer = 2
    [[rewards.terms]]
    kind = "function"            # any function, by import path
    path = "mypackage.rewards:brevity"
    weight = 0.1

Each term kind is a frozen dataclass below (its fields documented, checked when the config loads);
`workbench/tasks/rewards.py` computes them. The default is the verifier alone with weight 1. Whether a
rollout is correct is always the verifier's verdict, whatever the terms and weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from workbench.checks import build_config, check


def _check_common(where: str, name: str, weight: Any) -> None:
    check(not isinstance(weight, bool) and isinstance(weight, (int, float)) and math.isfinite(weight),
          f"{where}.weight", "a finite number", weight)
    check(isinstance(name, str) and name.strip() == name and bool(name) and len(name) <= 64, f"{where}.name",
          "a non-empty name of at most 64 characters, no surrounding spaces", name)


@dataclass(frozen=True)
class VerifierTerm:
    """kind = "verifier": the task verifier's reward (1 correct, 0 wrong for the built-in verifiers)."""

    weight: float = 1.0
    """Weight of the term in the reward (any finite number; negative punishes)."""
    name: str = "verifier"
    """The term's name in the store (`rollouts.reward_terms`) and in the step metric `reward/<name>`."""


@dataclass(frozen=True)
class FormatTerm:
    """kind = "format": 1 when the response matches a regular expression, else 0."""

    pattern: str = ""
    """The regular expression (Python `re` syntax), required; in TOML a literal string, e.g. `'^\\d+$'` or
    `'\\\\boxed\\{.+\\}'`."""
    match: Literal["search", "full"] = "search"
    """"search": the pattern may match anywhere in the response; "full": it must match all of it."""
    weight: float = 1.0
    """Weight of the term in the reward (any finite number)."""
    name: str = "format"
    """The term's name in the store and in the step metric `reward/<name>`."""


@dataclass(frozen=True)
class OverlongTerm:
    """kind = "overlong": DAPO's soft overlong punishment (Yu et al. 2025, eq. 13). With L the response's
    generated tokens, L_max = `max_length` and L_cache = `buffer`: 0 for L <= L_max - L_cache, then
    ((L_max - L_cache) - L) / L_cache, reaching -1 at L_max, and -1 beyond."""

    buffer: int = 0
    """L_cache: the punishment buffer in tokens before the length limit (required, 1..L_max)."""
    max_length: int = 0
    """L_max in tokens (0: `sampling.max_new_tokens`, the generation limit)."""
    weight: float = 1.0
    """Weight of the term in the reward (DAPO uses 1)."""
    name: str = "overlong"
    """The term's name in the store and in the step metric `reward/<name>`."""


@dataclass(frozen=True)
class FunctionTerm:
    """kind = "function": a user function given by import path, called once per rollout as
    `fn(response, prompt, *, length, finished, verdict)` -> float, where `response` is the decoded text,
    `prompt` a `workbench.tasks.Prompt` (text, answer, level, metadata), `length` the generated tokens,
    `finished` whether it ended with end-of-sequence and `verdict` the verifier's verdict. A function that
    raises or returns something other than a finite number stops the run with its term named."""

    path: str = ""
    """`module:function`, importable where the run starts (required)."""
    weight: float = 1.0
    """Weight of the term in the reward (any finite number)."""
    name: str = ""
    """The term's name in the store and in `reward/<name>` ("": the function's own name)."""


TERM_KINDS: dict[str, type] = {"verifier": VerifierTerm, "format": FormatTerm, "overlong": OverlongTerm,
                               "function": FunctionTerm}
"""kind -> the dataclass of its fields."""

Term = VerifierTerm | FormatTerm | OverlongTerm | FunctionTerm


def parse_term(data: Any, where: str) -> Term:
    """One `[[rewards.terms]]` table as its term dataclass; ConfigError naming `where` and the field."""
    import re

    from workbench.tasks.verifiers import load_user_verifier

    check(isinstance(data, dict), where, "a table with a kind", data)
    kind = data.get("kind")
    check(kind in TERM_KINDS, f"{where}.kind", f"a reward term: {', '.join(TERM_KINDS)}", kind)
    rest = {k: v for k, v in data.items() if k != "kind"}
    if kind == "function" and not rest.get("name") and isinstance(rest.get("path"), str):
        rest["name"] = rest["path"].rpartition(":")[2]
    term = build_config(TERM_KINDS[kind], rest, where=where)
    _check_common(where, term.name, term.weight)
    if isinstance(term, FormatTerm):
        check(isinstance(term.pattern, str) and bool(term.pattern), f"{where}.pattern",
              "required: a regular expression", term.pattern)
        try:
            re.compile(term.pattern)
            problem = ""
        except re.error as exc:
            problem = str(exc)
        check(not problem, f"{where}.pattern", f"not a regular expression: {problem}", term.pattern)
        check(term.match in ("search", "full"), f"{where}.match", "search or full", term.match)
    elif isinstance(term, OverlongTerm):
        for key, low in (("buffer", 1), ("max_length", 0)):
            value = getattr(term, key)
            check(isinstance(value, int) and not isinstance(value, bool) and value >= low, f"{where}.{key}",
                  f"an integer >= {low}", value)
        check(not term.max_length or term.buffer <= term.max_length, f"{where}.buffer",
              f"at most max_length = {term.max_length}", term.buffer)
    elif isinstance(term, FunctionTerm):
        check(isinstance(term.path, str) and bool(term.path), f"{where}.path", "required: module:function",
              term.path)
        load_user_verifier(term.path, where=f"{where}.path")
    return term


@dataclass(frozen=True)
class RewardsConfig:
    terms: list[dict[str, Any]] = field(default_factory=lambda: [{"kind": "verifier", "weight": 1.0}])
    """The reward's terms, each a table with a `kind` (verifier, format, overlong, function), a `weight`
    and the kind's own fields (docs/configs.md, `[[rewards.terms]]`); the reward is the weighted sum of
    their values, and each rollout stores every term's value (`rollouts.reward_terms`, unweighted).
    The default is the verifier alone with weight 1."""

    def __post_init__(self) -> None:
        terms = list(self.terms) if isinstance(self.terms, tuple) else self.terms  # a list built as a tuple
        check(isinstance(terms, list) and bool(terms), "rewards.terms", "a non-empty list of tables", terms)
        parsed = tuple(parse_term(t, f"rewards.terms[{i}]") for i, t in enumerate(self.terms))
        names = [t.name for t in parsed]
        for i, name in enumerate(names):
            check(name not in names[:i], f"rewards.terms[{i}].name",
                  "a name no earlier term uses: names are unique, set `name`", name)
        object.__setattr__(self, "terms", [dict(t) for t in self.terms])  # one form, whoever built it
        object.__setattr__(self, "_parsed", parsed)

    def parsed(self) -> tuple[Term, ...]:
        """The terms as their dataclasses, in order."""
        return self._parsed  # type: ignore[attr-defined]

    def check_lengths(self, max_new_tokens: int) -> None:
        """An overlong term's buffer must fit the generation limit it defaults to."""
        for i, t in enumerate(self.parsed()):
            if isinstance(t, OverlongTerm) and not t.max_length:
                check(t.buffer <= max_length_of(t, max_new_tokens), f"rewards.terms[{i}].buffer",
                      f"at most the length limit sampling.max_new_tokens = {max_new_tokens}", t.buffer)

    DOC_TABLES = [(f'### `[[rewards.terms]]` with kind = "{kind}"', cls) for kind, cls in TERM_KINDS.items()]


def max_length_of(term: OverlongTerm, max_new_tokens: int) -> int:
    """L_max of an overlong term: its own, else the generation limit."""
    return term.max_length or max_new_tokens
