"""The default task: arithmetic problems with difficulty levels, the model organism's world.

A level is a *spec* such as "2+1" (a two-digit number plus a one-digit number), "4+4", "2+2+2"
(three terms: a multi-step problem) or "2*2" (multiplication). The prompt text is the expression the
organism is conditioned on ("37+5="), the answer its value in digits ("42"), verified by exact match.
The default levels are additions from trivially easy ("1+1") to "3+2" (carries over three digits),
then "3*2", multiplication, which the organism is never taught (beyond its reach), so per-prompt
pass rates spread over [0, 1]. Multi-step levels ("2+2+2") and other operations ("2*1", "3-2") are
available through `levels`.

Profiles (`profile`, issue #17) pick the levels and the answer format, so that allocators can be
compared on workloads of different shapes (the organism's warm start follows the profile, see
`workbench/models/organism.py`):

- "default": the levels above; the answer is the value.
- "skewed": `SKEWED_LEVELS`, three easy additions the warm start learns cleanly, one it learns with
  near-miss answers, two multiplications it never sees: per-prompt pass rates are U-shaped (mostly
  ~1 or 0), as in late-stage math RL; a small pool (1,536 train prompts) that a run revisits over
  many epochs, as late-stage training does.
- "long": `LONG_LEVELS`, sums of 2-4 terms answered with worked intermediate steps
  ("12+34+56=" -> "46+56=102"): responses from 1 to ~17 tokens. Only the final value (after the
  last "=") is verified.
- "tools": `TOOLS_LEVELS`, two easy additions and three levels the organism cannot compute in its
  head (two- and three-digit multiplication, a product plus a term), answered in episodes: the model
  may call the calculator (`<calc>37*48</calc>`), reads its result (`<result>1776</result>`, a tool
  turn) and answers. The warm start calls the tool on a minority of problems, so that calling it is
  what RL must find (`workbench/models/organism.py`). Only the final answer is verified: the text after
  the last tool result.

Problems are generated from the seed alone (Python's `random.Random` seeded with a string: the same
on every platform and Python version), one stream per (split, level). Eval problems are drawn first;
train problems never repeat an eval problem, and no problem appears twice within a split.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cached_property

from workbench.checks import build_config, require
from workbench.errors import ConfigError
from workbench.tasks.base import Prompt, VerifyResult
from workbench.tasks.verifiers import BUILTIN_METHODS, Verifier

LEVEL_SPEC = re.compile(r"^[1-6](?:[+\-*][1-6]){1,3}$")
DEFAULT_LEVELS = ("1+1", "2+1", "2+2", "3+2", "3*2")
SKEWED_LEVELS = ("1+1", "2+1", "2+2", "3+2", "2*2", "3*2")
LONG_LEVELS = ("1+1", "2+2", "2+2+2", "3+2+2", "2+2+2+2")
TOOLS_LEVELS = ("1+1", "2+1", "2*2", "3*2", "2*2+2")
PROFILE_LEVELS = {"default": DEFAULT_LEVELS, "skewed": SKEWED_LEVELS, "long": LONG_LEVELS, "tools": TOOLS_LEVELS}
PROFILES = tuple(PROFILE_LEVELS)
PROFILE_TRAIN_SIZE = {"default": 6000, "skewed": 1536, "long": 6000, "tools": 6000}
RESULT_CLOSE = "</result>"
"""Closes a tool result in the "tools" profile's episodes (`workbench/models/tokenizer.py`, TOOL_TOKENS)."""
RESULT_CLOSES = (RESULT_CLOSE, "</tool_response>")
"""The tool-result closing tags of the two call syntaxes (calc, hermes; `workbench/tools/parsers.py`):
under the "tools" profile only the text after the last one is the episode's answer."""
OPERANDS = "abcd"
"""A template's names of an expression's operands in order (`{a}`, `{b}`, ...: word problems)."""


@dataclass(frozen=True)
class ArithmeticTaskConfig:
    """The synthetic arithmetic task (the organism's default)."""

    kind: str = "arithmetic"
    """Task kind; always "arithmetic" for this config."""
    seed: int = 0
    """Seed of the problem generator: the same seed gives the same prompts, ids and splits."""
    profile: str = "default"
    """Workload profile: "default", "skewed" (U-shaped pass rates at the warm start, most prompts
    solved or unsolvable, as in late-stage math RL) or "long" (answers with worked steps of widely
    varying length, only the final value verified). It sets the levels and the pool size when those are left unset
    and the organism's warm start (see docs/allocators.md, "Workload profiles")."""
    levels: tuple[str, ...] | None = None
    """Difficulty levels, easiest first; level i (1-based) is `levels[i-1]`. A spec gives the digits of
    each operand joined by its operator: "2+1" is 2-digit + 1-digit, "2+2+2" three 2-digit terms,
    "2*1" multiplication. Operands have 1-6 digits; 2-4 terms; operators + - *. None: the profile's
    levels (default profile: 1+1, 2+1, 2+2, 3+2, 3*2)."""
    train_size: int | None = None
    """Train prompts in all, spread evenly over levels (a level with fewer distinct problems gets
    what it has). None: the profile's (default and long 6000; skewed 1536, a pool revisited over many
    epochs, as in late-stage RL)."""
    eval_per_level: int = 32
    """Held-out eval prompts per level."""
    template: str = "{expr}="
    """Prompt text; `{expr}` is replaced by the expression (e.g. "37+5"), `{expr_spaced}` by the
    expression with spaced operators ("37 + 5", for questions in words to a chat model), `{a}`, `{b}`,
    `{c}`, `{d}` by its operands in order (word problems: "A shop packs {a} boxes of {b} pens each...");
    a literal brace is written twice (`{{`)."""
    verifier: str = "exact"
    """"exact", "math", "number" (the number after the last "=", else the last one: answers in words)
    or a user verifier "module:function"."""
    verify_timeout_s: float = 5.0
    """Per-call timeout of the verifier (seconds)."""

    def __post_init__(self) -> None:
        require(self.kind == "arithmetic", "task.kind", f"must be 'arithmetic' for this config, got {self.kind!r}")
        require(isinstance(self.seed, int), "task.seed", f"must be an integer, got {self.seed!r}")
        require(self.profile in PROFILES, "task.profile", f"{self.profile!r}; allowed: {', '.join(PROFILES)}")
        if self.levels is None:
            object.__setattr__(self, "levels", PROFILE_LEVELS[self.profile])
        object.__setattr__(self, "levels", tuple(self.levels))
        if self.train_size is None:
            object.__setattr__(self, "train_size", PROFILE_TRAIN_SIZE[self.profile])
        require(len(self.levels) >= 1, "task.levels", "needs at least one level")
        for i, spec in enumerate(self.levels):
            require(
                isinstance(spec, str) and bool(LEVEL_SPEC.match(spec)),
                f"task.levels[{i}]",
                f"{spec!r} is not a level spec like '2+1', '2+2+2' or '2*1' (1-6 digits, 2-4 terms, + - *)",
            )
        require(len(set(self.levels)) == len(self.levels), "task.levels", "has a duplicate level")
        require(self.train_size >= 1, "task.train_size", f"must be >= 1, got {self.train_size}")
        require(self.eval_per_level >= 1, "task.eval_per_level", f"must be >= 1, got {self.eval_per_level}")
        require(any("{" + k + "}" in self.template for k in ("expr", "expr_spaced", "a")), "task.template",
                f"must contain '{{expr}}', '{{expr_spaced}}' or the operands '{{a}}', '{{b}}', ..., got {self.template!r}")
        try:
            fill_template(self.template, "1+2+3+4")
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(f"task.template: {self.template!r} does not format ({type(exc).__name__}: {exc}); "
                              "the fields are {expr}, {expr_spaced}, {a}-{d}, and a literal brace is written twice")
        require(self.verify_timeout_s > 0, "task.verify_timeout_s", "must be > 0")
        if self.verifier not in BUILTIN_METHODS and ":" not in self.verifier:
            raise ConfigError(f"task.verifier: {self.verifier!r}; allowed: exact, math, number or 'module:function'")

    @classmethod
    def from_dict(cls, data: dict) -> "ArithmeticTaskConfig":
        """Build from a plain dict (TOML/JSON), rejecting unknown keys by name."""
        return build_config(cls, data, where="task")


def _operand(rng: random.Random, digits: int) -> int:
    return rng.randint(0, 9) if digits == 1 else rng.randint(10 ** (digits - 1), 10**digits - 1)


def sample_problem(rng: random.Random, spec: str) -> tuple[str, str]:
    """One problem of level `spec`: (expression, answer), e.g. ("37+5", "42")."""
    parts = re.split(r"([+\-*])", spec)
    expr = "".join(p if p in "+-*" else str(_operand(rng, int(p))) for p in parts)
    return expr, str(_evaluate(expr))


def worked_answer(expr: str, final: str) -> str:
    """The "long" profile's answer text: the running sum written out term by term, ending in `final`.

    "12+34+56+7" -> "46+56=102+7=" + final (final is normally "109"); two terms -> just `final`.
    Only additions are worked out; other expressions give `final` alone."""
    terms = expr.split("+")
    if len(terms) < 3 or any(not t.isdigit() for t in terms):
        return final
    total, parts = int(terms[0]) + int(terms[1]), []
    for t in terms[2:]:
        parts.append(f"{total}+{t}=")
        total += int(t)
    return "".join(parts) + final


def final_value(response: str) -> str:
    """What the "long" profile verifies: the text after the last "=" (the whole response when none)."""
    return response.rsplit("=", 1)[-1]


def fill_template(template: str, expr: str) -> str:
    """A task template filled for `expr`: `{expr}`, `{expr_spaced}` and its operands `{a}`, `{b}`, ...
    ("A shop packs {a} boxes of {b} pens" for "37*48")."""
    operands = dict(zip(OPERANDS, re.split(r"[+\-*]", expr)))
    return template.format(expr=expr, expr_spaced=spaced(expr), **operands)


def spaced(expr: str) -> str:
    """The expression with a space either side of each operator: "37+5" -> "37 + 5"."""
    return re.sub(r"([+\-*])", r" \1 ", expr)


def _evaluate(expr: str) -> int:
    """Value of an expression of non-negative integers and + - * (usual precedence)."""
    total = 0
    for sign, term in re.findall(r"([+\-]?)([^+\-]+)", expr):
        value = 1
        for factor in term.split("*"):
            value *= int(factor)
        total += -value if sign == "-" else value
    return total


def level_space(spec: str) -> int:
    """Number of distinct problems of a level (caps how many unique prompts it can give)."""
    n = 1
    for p in re.split(r"[+\-*]", spec):
        d = int(p)
        n *= 10 if d == 1 else 9 * 10 ** (d - 1)
    return n


def _draw_unique(rng: random.Random, spec: str, n: int, exclude: set[str]) -> list[tuple[str, str]]:
    """Up to `n` distinct problems of `spec` not in `exclude` (fewer when the level runs out)."""
    n = min(n, max(0, level_space(spec) - len(exclude)))
    out: list[tuple[str, str]] = []
    seen = set(exclude)
    attempts = 0
    while len(out) < n and attempts < 50 * n + 1000:
        attempts += 1
        expr, answer = sample_problem(rng, spec)
        if expr not in seen:
            seen.add(expr)
            out.append((expr, answer))
    return out


class ArithmeticTask:
    """Prompts and verifier of the arithmetic task (see the module docstring)."""

    def __init__(self, cfg: ArithmeticTaskConfig | None = None):
        self.cfg = cfg or ArithmeticTaskConfig()
        self.verifier = Verifier(self.cfg.verifier, self.cfg.verify_timeout_s)

    def _prompt(self, split: str, i: int, level: int, expr: str, answer: str) -> Prompt:
        spec = self.cfg.levels[level - 1]
        return Prompt(
            id=f"arith-{split}-{i:06d}",
            text=fill_template(self.cfg.template, expr),
            answer=answer,
            level=level,
            split=split,
            metadata={"spec": spec, "expr": expr},
        )

    @cached_property
    def _eval_exprs(self) -> list[list[tuple[str, str]]]:
        cfg = self.cfg
        return [
            _draw_unique(random.Random(f"arith:{cfg.seed}:eval:{spec}"), spec, cfg.eval_per_level, set())
            for spec in cfg.levels
        ]

    @cached_property
    def eval_exprs(self) -> frozenset[str]:
        """Every eval expression (the warm start and the train split stay clear of them)."""
        return frozenset(e for level in self._eval_exprs for e, _ in level)

    def eval_prompts(self) -> list[Prompt]:
        """`eval_per_level` held-out prompts per level, easiest level first."""
        out = []
        for level, problems in enumerate(self._eval_exprs, start=1):
            out.extend(self._prompt("eval", len(out), level, e, a) for e, a in problems)
        return out

    def train_prompts(self) -> list[Prompt]:
        """`train_size` train prompts spread evenly over levels, none equal to an eval prompt."""
        cfg, out = self.cfg, []
        per, extra = divmod(cfg.train_size, len(cfg.levels))
        for level, spec in enumerate(cfg.levels, start=1):
            rng = random.Random(f"arith:{cfg.seed}:train:{spec}")
            exclude = {e for e, _ in self._eval_exprs[level - 1]}
            problems = _draw_unique(rng, spec, per + (level <= extra), exclude)
            out.extend(self._prompt("train", len(out), level, e, a) for e, a in problems)
        return out

    def completion(self, expr: str, final: str) -> str:
        """The text a model should produce for `expr` whose value is written `final` (the warm start's
        target): `final` itself, or under the "long" profile the worked steps ending in it."""
        return worked_answer(expr, final) if self.cfg.profile == "long" else final

    def verify(self, response: str, prompt: Prompt) -> VerifyResult:
        """Judge a response against the prompt's answer (never raises); under the "long" profile only
        the final value, after the last "=", is judged; under "tools" the text after the last tool
        result (`</result>` or `</tool_response>`: an episode's final answer; the whole response when it
        made no call)."""
        if self.cfg.profile == "long":
            response = final_value(response)
        elif self.cfg.profile == "tools":
            cut = max(response.rfind(close) + len(close) if close in response else 0 for close in RESULT_CLOSES)
            response = response[cut:]
        return self.verifier(response, prompt.answer, prompt)
