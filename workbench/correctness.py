"""What counts as a correct rollout: one definition for the engine, the allocators, the analysis, the
importers and the dashboard.

A rollout's correctness is a verdict, stored apart from its reward (`rollouts.correct`):

- Our engine stores the verifier's own judgement (`VerifyResult.correct`): a reward may carry
  other terms (a format bonus, a length penalty), so correctness is never read off the reward.
- An imported run stores the source's verdict where it logs one (verl's `acc` reward-extra key,
  a `correct` field mapped with `--map`), else the run's *rule* applied to the reward: the rule
  given at import (`workbench import ... --correct-if 'reward>=1'`), or `DEFAULT_RULE`. The rule is
  kept in the run's config (`config.correctness.rule`).
- A row without a stored verdict (a store from before the `correct` column, written by code that
  does not set it) is judged by its run's rule; readers use `correct_expr` / `with_correct` for that.

A rule is `reward OP NUMBER` with OP one of `>=`, `>`, `<=`, `<`, `==` (spaces allowed), for example
`reward>=1` for a verifier reward of 1 plus a format bonus below 1.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from workbench.errors import DataError

if TYPE_CHECKING:  # polars is imported where an expression is built: the allocators import this module
    import polars as pl

DEFAULT_RULE = "reward>=0.5"
"""The rule where neither a verdict nor a rule given at import decides: a 0/1 verifier reward (ours,
verl's and NeMo-RL's default math rewards, TRL's accuracy functions) is correct at 1."""

_OPS: dict[str, Callable[[Any, Any], Any]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}
_RULE = re.compile(r"^\s*reward\s*(>=|<=|==|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


@dataclass(frozen=True)
class Rule:
    """`reward OP threshold`: whether a reward counts as correct where no verdict was logged."""

    op: str
    threshold: float

    @property
    def text(self) -> str:
        """The rule as it is written and stored (`reward>=1`, `reward>0.25`)."""
        number = repr(self.threshold)
        return f"reward{self.op}{number[:-2] if number.endswith('.0') else number}"

    def __call__(self, reward: Any) -> Any:
        """A bool for a number, a bool array for an array (NaN is never correct)."""
        return _OPS[self.op](reward, self.threshold)

    def sql(self, column: str = "reward") -> str:
        """The rule as a SQL condition over `column` (the operator is one of five, the number a float)."""
        return f"{column} {'=' if self.op == '==' else self.op} {float(self.threshold)!r}"

    def expr(self, column: str = "reward") -> pl.Expr:
        """The rule as a polars expression over `column` (null where the reward is null)."""
        import polars as pl

        return _OPS[self.op](pl.col(column), self.threshold)


def parse_rule(text: str | Rule | None, *, where: str = "--correct-if") -> Rule:
    """`"reward>=1"` as a Rule (None: the default rule); DataError naming `where` otherwise."""
    if isinstance(text, Rule):
        return text
    if text is None:
        text = DEFAULT_RULE
    m = _RULE.match(str(text))
    if not m:
        raise DataError(f"{where} {text!r}: expected reward OP NUMBER with OP one of >=, >, <=, <, == "
                        "(for example 'reward>=1')")
    threshold = float(m.group(2))
    if not math.isfinite(threshold):
        raise DataError(f"{where} {text!r}: the threshold must be a finite number")
    return Rule(m.group(1), threshold)


DEFAULT = parse_rule(DEFAULT_RULE)
"""The default rule, parsed."""


def is_correct(reward: float, rule: Rule = DEFAULT) -> bool:
    """One reward judged by `rule` (for a reward with no verdict of its own)."""
    return bool(rule(float(reward)))


def run_rule(config: Mapping[str, Any] | str | None) -> Rule:
    """The rule of a run from its config (a dict or the stored JSON text): `correctness.rule`, else
    the default."""
    if isinstance(config, str):
        import json

        try:
            config = json.loads(config) if config else {}
        except json.JSONDecodeError:
            config = {}
    section = (config or {}).get("correctness") if isinstance(config, Mapping) else None
    text = section.get("rule") if isinstance(section, Mapping) else None
    return parse_rule(text, where="config correctness.rule") if text else DEFAULT


def rule_config(rule: Rule, verdict: str) -> dict[str, str]:
    """The run config's `correctness` section: the rule and where verdicts come from."""
    return {"rule": rule.text, "verdict": verdict}


def correct_expr(columns: Iterable[str], rule: Rule = DEFAULT) -> pl.Expr:
    """Each row's correctness as a polars expression aliased `correct`: the stored verdict where the
    frame has a `correct` column and it is not null, else `rule` over `reward`."""
    import polars as pl

    judged = rule.expr("reward")
    if "correct" in set(columns):
        return pl.col("correct").cast(pl.Boolean).fill_null(judged).alias("correct")
    return judged.alias("correct")


def with_correct(frame: pl.DataFrame, rule: Rule = DEFAULT) -> pl.DataFrame:
    """`frame` with its `correct` column filled (see `correct_expr`)."""
    return frame.with_columns(correct_expr(frame.columns, rule))
