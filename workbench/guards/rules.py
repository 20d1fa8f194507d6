"""The rule language of guards: one line, parsed into a small tree and evaluated; never `eval`.

    rollout/entropy_mean < 0.5 * baseline(rollout/entropy_mean, 10)
    train/loss is not finite or train/grad_norm is not finite
    share(truncated) > 0.9
    share(repeat_frac >= 0.8 and length >= 6) > 0.5

Grammar (lowest precedence first):

    rule    := or
    or      := and ("or" and)*
    and     := not ("and" not)*
    not     := "not" not | compare
    compare := sum [("<" | "<=" | ">" | ">=" | "==" | "!=") sum] | sum "is" ["not"] "finite"
    sum     := product (("+" | "-") product)*
    product := unary (("*" | "/") unary)*
    unary   := "-" unary | atom
    atom    := NUMBER | NAME | FUNC "(" args ")" | metric("name") | "(" rule ")"

A NAME is a metric as the engine records it (`train/loss`, `rollout/entropy_mean`, `eval/pass1`; a
`/` followed by a letter belongs to the name, so divide with spaces: `a / 2`), or any name in
quotes with `metric('...')`. Inside `share(...)` and `count(...)` names are the fields of one
rollout (`ROLLOUT_FIELDS`). A value that does not exist yet (a metric not recorded at this step, a
baseline before its steps are in) is unknown: comparisons with it are unknown, `and`/`or`/`not`
follow three-valued logic, and a rule fires only when it is true. A rollout predicate holds for a
rollout when its value is known and true (a number: not 0), so `share(truncated)` counts the truncated.

Evaluating a parsed rule is `workbench.guards.evaluate`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from workbench.errors import ConfigError

ROLLOUT_FIELDS = {
    "length": "generated tokens of the response",
    "reward": "the response's reward",
    "truncated": "1 when the response hit the token limit (no end-of-sequence), else 0",
    "repeat_frac": "share of the response's last 64 characters (all of a shorter one) taken by its most "
                   "repeated character, bigram or trigram (1.0 for '!!!!!!', 0.25 for '1357')",
    "entropy_mean": "mean per-token entropy of the response",
    "chars": "characters of the response text",
}
"""What a rollout predicate (inside `share(...)` / `count(...)`) may read, with its meaning."""

WINDOW_FUNCS = {
    "baseline": "baseline(m, n): mean of metric m over the run's first n recorded steps (unknown until n)",
    "mean": "mean(m, n): mean of metric m over its last n recorded values, this step included",
    "delta": "delta(m, n): latest value of metric m minus its value n recordings earlier",
    "last": "last(m): the latest recorded value of metric m (this step or an earlier one)",
}
VALUE_FUNCS = {"abs": 1, "min": 2, "max": 2}
ROLLOUT_FUNCS = {
    "share": "share(p): fraction of this step's rollouts for which predicate p holds",
    "count": "count(p): number of this step's rollouts for which predicate p holds",
}


@dataclass(frozen=True)
class Num:
    value: float


@dataclass(frozen=True)
class Metric:
    name: str


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Unary:
    op: str  # "-" | "not"
    arg: Any


@dataclass(frozen=True)
class Binary:
    op: str
    left: Any
    right: Any


@dataclass(frozen=True)
class Finite:
    arg: Any
    negate: bool


_TOKEN = re.compile(r"""\s*(?:
    (?P<num>\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_@]*(?:/[A-Za-z_][A-Za-z0-9_@]*)*)
  | (?P<str>'[^']*'|"[^"]*")
  | (?P<op><=|>=|==|!=|[<>()+\-*/,])
)""", re.VERBOSE)

_KEYWORDS = {"and", "or", "not", "is", "finite"}


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ConfigError(f"guards.rule {text!r}: unexpected {text[pos:].strip()[:12]!r} at column {pos + 1}")
        group = m.lastgroup or ""
        val, kind = m.group(group), group
        if kind == "name" and val in _KEYWORDS:
            kind = "kw"
        out.append((kind, val, m.start(group) + 1))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def error(self, what: str) -> ConfigError:
        if self.i < len(self.toks):
            _, val, col = self.toks[self.i]
            return ConfigError(f"guards.rule {self.text!r}: {what}, found {val!r} at column {col}")
        return ConfigError(f"guards.rule {self.text!r}: {what}, found the end of the rule")

    def peek(self, val: str | None = None, kind: str | None = None) -> bool:
        if self.i >= len(self.toks):
            return False
        k, v, _ = self.toks[self.i]
        return (val is None or v == val) and (kind is None or k == kind)

    def take(self, val: str | None = None, kind: str | None = None, what: str = "") -> str:
        if not self.peek(val, kind):
            raise self.error(what or f"expected {val or kind!r}")
        self.i += 1
        return self.toks[self.i - 1][1]

    def parse(self) -> Any:
        if not self.toks:
            raise ConfigError("guards.rule: empty (write a condition, e.g. 'train/loss is not finite')")
        node = self.or_()
        if self.i < len(self.toks):
            raise self.error("expected the end of the rule (or 'and' / 'or')")
        return node

    def or_(self) -> Any:
        node = self.and_()
        while self.peek("or", "kw"):
            self.i += 1
            node = Binary("or", node, self.and_())
        return node

    def and_(self) -> Any:
        node = self.not_()
        while self.peek("and", "kw"):
            self.i += 1
            node = Binary("and", node, self.not_())
        return node

    def not_(self) -> Any:
        if self.peek("not", "kw"):
            self.i += 1
            return Unary("not", self.not_())
        return self.compare()

    def compare(self) -> Any:
        left = self.sum_()
        if self.peek("is", "kw"):
            self.i += 1
            negate = self.peek("not", "kw")
            if negate:
                self.i += 1
            self.take("finite", "kw", "expected 'finite' after 'is' / 'is not'")
            return Finite(left, negate)
        for op in ("<", "<=", ">", ">=", "==", "!="):
            if self.peek(op, "op"):
                self.i += 1
                return Binary(op, left, self.sum_())
        return left

    def sum_(self) -> Any:
        node = self.product()
        while self.peek("+", "op") or self.peek("-", "op"):
            op = self.take()
            node = Binary(op, node, self.product())
        return node

    def product(self) -> Any:
        node = self.unary()
        while self.peek("*", "op") or self.peek("/", "op"):
            op = self.take()
            node = Binary(op, node, self.unary())
        return node

    def unary(self) -> Any:
        if self.peek("-", "op"):
            self.i += 1
            return Unary("-", self.unary())
        return self.atom()

    def atom(self) -> Any:
        if self.peek(kind="num"):
            return Num(float(self.take()))
        if self.peek("(", "op"):
            self.i += 1
            node = self.or_()
            self.take(")", "op", "expected ')'")
            return node
        if self.peek(kind="name"):
            name = self.take()
            if self.peek("(", "op"):
                return self.call(name)
            return Metric(name)
        raise self.error("expected a number, a metric name, a function or '('")

    def call(self, name: str) -> Any:
        self.take("(", "op")
        if name == "metric":
            if not self.peek(kind="str"):
                raise self.error("metric(...) takes a quoted name, e.g. metric('train/loss')")
            node = Metric(self.take()[1:-1])
            self.take(")", "op", "expected ')' after metric('...')")
            return node
        known = {**WINDOW_FUNCS, **VALUE_FUNCS, **ROLLOUT_FUNCS}
        if name not in known:
            self.i -= 2
            raise self.error(f"unknown function {name!r} (functions: metric, {', '.join(known)})")
        args = [self.or_()]
        while self.peek(",", "op"):
            self.i += 1
            args.append(self.or_())
        self.take(")", "op", f"expected ',' or ')' in {name}(...)")
        return Call(name, tuple(args))


def parse_rule(text: str) -> Any:
    """Parse `text` into a tree (Num, Metric, Call, Unary, Binary, Finite); ConfigError on bad syntax,
    a wrong argument count, or a rollout field used outside share()/count() (and the reverse)."""
    if not isinstance(text, str):
        raise ConfigError(f"guards.rule: {text!r} is not allowed (a one-line condition)")
    tree = _Parser(text).parse()
    _check(tree, text, inside_rollouts=False)
    return tree


def _check(node: Any, text: str, *, inside_rollouts: bool) -> None:
    if isinstance(node, Metric):
        if inside_rollouts and node.name not in ROLLOUT_FIELDS:
            raise ConfigError(f"guards.rule {text!r}: {node.name!r} is not a rollout field inside share()/count() "
                              f"(fields: {', '.join(ROLLOUT_FIELDS)})")
    elif isinstance(node, Call):
        f, args = node.func, node.args
        if f in ROLLOUT_FUNCS:
            if inside_rollouts or len(args) != 1:
                raise ConfigError(f"guards.rule {text!r}: {f}(p) takes one rollout predicate and cannot nest")
            _check(args[0], text, inside_rollouts=True)
            return
        if inside_rollouts and f in WINDOW_FUNCS:
            raise ConfigError(f"guards.rule {text!r}: {f}() reads step metrics, not inside share()/count()")
        want = {"baseline": 2, "mean": 2, "delta": 2, "last": 1}.get(f) or VALUE_FUNCS[f]
        if len(args) != want:
            raise ConfigError(f"guards.rule {text!r}: {f}() takes {want} argument(s), got {len(args)}")
        if f in WINDOW_FUNCS:
            if not isinstance(args[0], Metric):
                raise ConfigError(f"guards.rule {text!r}: the first argument of {f}() must be a metric name")
            if want == 2 and not (isinstance(args[1], Num) and args[1].value >= 1 and args[1].value.is_integer()):
                raise ConfigError(f"guards.rule {text!r}: the second argument of {f}() must be a whole number >= 1")
            return
        for a in args:
            _check(a, text, inside_rollouts=inside_rollouts)
    elif isinstance(node, (Unary, Finite)):
        _check(node.arg, text, inside_rollouts=inside_rollouts)
    elif isinstance(node, Binary):
        _check(node.left, text, inside_rollouts=inside_rollouts)
        _check(node.right, text, inside_rollouts=inside_rollouts)


def metric_names(node: Any) -> set[str]:
    """Step metrics a rule reads (not the rollout fields inside share()/count())."""
    if isinstance(node, Metric):
        return {node.name}
    if isinstance(node, Call):
        if node.func in ROLLOUT_FUNCS:
            return set()
        return set().union(*(metric_names(a) for a in node.args))
    if isinstance(node, (Unary, Finite)):
        return metric_names(node.arg)
    if isinstance(node, Binary):
        return metric_names(node.left) | metric_names(node.right)
    return set()


def rollout_predicates(node: Any) -> list[Any]:
    """The predicates of the rule's share()/count() calls (their matching rollouts are the evidence)."""
    if isinstance(node, Call):
        if node.func in ROLLOUT_FUNCS:
            return [node.args[0]]
        return [p for a in node.args for p in rollout_predicates(a)]
    if isinstance(node, (Unary, Finite)):
        return rollout_predicates(node.arg)
    if isinstance(node, Binary):
        return rollout_predicates(node.left) + rollout_predicates(node.right)
    return []
