"""The rule language: parsing (bad rules rejected with one line naming the place), three-valued
evaluation, window functions over the run's history, rollout predicates."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workbench.errors import ConfigError
from workbench.guards.evaluate import (
    Context,
    Rollouts,
    evaluate,
    evaluate_rows,
    holds,
    matching_rollouts,
    predicate_mask,
)
from workbench.guards.rules import ROLLOUT_FIELDS, metric_names, parse_rule, rollout_predicates


def value(rule: str, metrics=None, history=None, rollouts=None):
    return evaluate(parse_rule(rule), Context(metrics or {}, history or {}, rollouts))


def test_arithmetic_precedence_and_comparisons():
    assert value("1 + 2 * 3 == 7")
    assert value("(1 + 2) * 3 == 9")
    assert value("-2 * -3 > 5.5")
    assert value("10 / 4 == 2.5")
    assert value("1e-3 < 0.01 and not 2 < 1 or 0 > 1")
    assert value("abs(-3) == 3 and min(2, 5) == 2 and max(2, 5) == 5")


def test_metric_names_with_slashes_and_quoted():
    m = {"train/loss": 2.0, "perf/worker/ray-0/rollouts_per_s": 3.0}
    assert value("train/loss / 2 == 1", m)
    assert value("metric('perf/worker/ray-0/rollouts_per_s') > 2.5", m)
    assert metric_names(parse_rule("train/loss > mean(train/grad_norm, 3) and share(length > 3) > 0")) == {
        "train/loss", "train/grad_norm"}


def test_finite():
    assert value("train/loss is not finite", {"train/loss": math.nan})
    assert value("train/loss is not finite", {"train/loss": math.inf})
    assert not value("train/loss is not finite", {"train/loss": 1.0})
    assert value("train/loss is finite", {"train/loss": 1.0})
    assert not value("train/loss > 1", {"train/loss": math.nan})  # NaN compares false


def test_unknown_is_three_valued():
    assert value("train/loss > 1", {}) is None
    assert value("not train/loss > 1", {}) is None
    assert value("train/loss > 1 or 2 > 1", {}) is True
    assert value("train/loss > 1 and 2 < 1", {}) is False
    assert value("train/loss > 1 and 2 > 1", {}) is None


def test_window_functions():
    h = {"m": [1.0, 2.0, 3.0, 10.0]}
    assert value("baseline(m, 2) == 1.5", {"m": 10.0}, h)
    assert value("mean(m, 2) == 6.5", {"m": 10.0}, h)
    assert value("delta(m, 3) == 9", {"m": 10.0}, h)
    assert value("last(m) == 10", {}, h)
    assert value("baseline(m, 5) > 0", {"m": 10.0}, h) is None  # not enough steps yet
    assert value("delta(m, 4) > 0", {"m": 10.0}, h) is None


def test_rollout_predicates_and_evidence():
    rows = [dict(length=8.0, repeat_frac=1.0, truncated=1.0, reward=0.0, entropy_mean=0.1, chars=8.0),
            dict(length=3.0, repeat_frac=0.3, truncated=0.0, reward=1.0, entropy_mean=0.5, chars=3.0),
            dict(length=8.0, repeat_frac=0.9, truncated=1.0, reward=0.0, entropy_mean=0.1, chars=8.0)]
    tree = parse_rule("share(truncated and repeat_frac >= 0.8) > 0.5")
    ctx = Context({}, {}, rows)
    assert evaluate(tree, ctx) is True
    assert matching_rollouts(tree, ctx) == [0, 2]
    assert value("count(reward == 1) == 1", rollouts=rows)
    assert value("share(truncated) > 0", rollouts=[]) is None  # no rollouts: unknown


@pytest.mark.parametrize("rule, says", [
    ("", "empty"),
    ("train/loss >", "found the end of the rule"),
    ("train/loss > > 1", "at column 14"),
    ("import os", "expected the end of the rule"),
    ("__import__('os').system('x')", "unexpected \".system"),
    ("__import__('os')", "unknown function '__import__'"),
    ("open('f') > 1", "unknown function 'open'"),
    ("train/loss ; 1", "unexpected '; 1' at column 11"),
    ("mean(train/loss) > 1", "takes 2 argument"),
    ("mean(train/loss, 0) > 1", "whole number >= 1"),
    ("baseline(2, 3) > 1", "must be a metric name"),
    ("share(train/loss > 1) > 0", "not a rollout field"),
    ("share(share(length > 1) > 0) > 0", "cannot nest"),
    ("mean(train/loss, 2", "expected ',' or ')'"),
    ("train/loss is big", "expected 'finite'"),
    ("metric(train) > 1", "quoted name"),
])
def test_bad_rules_are_one_clear_line(rule, says):
    with pytest.raises(ConfigError) as exc:
        parse_rule(rule)
    msg = str(exc.value)
    assert msg.startswith("guards.rule") and "\n" not in msg and says in msg, msg


_FIELD = st.one_of(st.none(), st.sampled_from([0.0, 1.0, -2.5, 0.75, 6.0]), st.just(math.nan), st.just(math.inf))
PREDICATES = [
    "truncated", "not truncated", "repeat_frac >= 0.75 and chars >= 6", "reward == 1 or truncated",
    "not (reward > 0 and length < 3)", "abs(reward - 1) < 0.5", "min(reward, length) > 0 or max(chars, 1) == 1",
    "reward / length > 0.1", "-reward <= 0", "entropy_mean is not finite", "(reward and truncated) or not chars",
    "length * 2 + 1 != 13",
]


@given(rows=st.lists(st.fixed_dictionaries({f: _FIELD for f in ROLLOUT_FIELDS}), max_size=12),
       pred=st.sampled_from(PREDICATES))
def test_rollout_predicates_over_columns_equal_the_plain_loop(rows, pred):
    """The columns (numpy over every rollout) against `evaluate` on each row: same values, same
    unknowns, for every predicate shape the grammar has, NaN, infinities and missing fields included."""
    tree = parse_rule(f"count({pred}) >= 0")
    p = rollout_predicates(tree)[0]
    r = Rollouts.from_rows(rows)
    values, known = evaluate_rows(p, r)
    for i, row in enumerate(rows):
        want = evaluate(p, Context({}, {}), r.row(i))
        assert known[i] == (want is not None), (pred, row)
        if want is not None:
            got = float(values[i])
            assert got == float(want) or (math.isnan(got) and math.isnan(float(want))), (pred, row, got, want)
        assert predicate_mask(p, r)[i] == holds(want)
    loop_hits = [i for i, row in enumerate(rows) if holds(evaluate(p, Context({}, {}), r.row(i)))]
    assert matching_rollouts(tree, Context({}, {}, r)) == loop_hits


def test_a_bare_field_is_a_predicate():
    """`share(truncated)` counts the truncated rollouts (a field's value 1.0 holds; before the columns, only
    a comparison's True did, and the `truncation` preset never fired)."""
    rows = [dict(truncated=1.0), dict(truncated=1.0), dict(truncated=0.0), dict(truncated=None)]
    assert value("share(truncated) == 0.5", rollouts=rows) is True  # an unknown one counts in the share, not as a hit
    assert value("count(truncated) == 2", rollouts=rows) is True
