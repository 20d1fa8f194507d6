"""The one definition of a correct rollout (workbench.correctness): rules parse, print back and judge as
written; bad rules are refused naming the option; a verifier's verdict is its own, not its reward's."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from workbench.correctness import DEFAULT, parse_rule, run_rule, with_correct
from workbench.errors import DataError


@pytest.mark.parametrize("text,reward,want", [
    ("reward>=1", 1.0, True), ("reward>=1", 0.99, False), (" reward > 0 ", 0.1, True), ("reward>0", 0.0, False),
    ("reward<=-0.5", -1.0, True), ("reward<0.25", 0.3, False), ("reward==1", 1.0, True), ("reward>=1e-3", 0.001, True),
])
def test_rules_judge_as_written_and_print_back(text, reward, want):
    rule = parse_rule(text)
    assert rule(reward) is want
    assert parse_rule(rule.text) == rule and " " not in rule.text
    assert rule(math.nan) is False
    assert rule(np.array([reward]))[0] == want


@pytest.mark.parametrize("bad", ["score>1", "reward >", "reward => 1", "reward>=abc", "reward>=1;drop", "", "reward>=inf"])
def test_a_bad_rule_is_refused_with_one_line_naming_the_option(bad):
    with pytest.raises(DataError, match=r"^--correct-if .*reward OP NUMBER") as err:
        parse_rule(bad)
    assert "\n" not in str(err.value)


def test_stored_verdicts_win_and_the_run_rule_fills_the_rest():
    frame = pl.DataFrame({"reward": [1.1, 0.1, 0.1, 0.7], "correct": [True, None, False, None]})
    assert with_correct(frame)["correct"].to_list() == [True, False, False, True]
    assert with_correct(frame, parse_rule("reward>0"))["correct"].to_list() == [True, True, False, True]
    assert with_correct(frame.drop("correct"))["correct"].to_list() == [True, False, False, True]
    assert run_rule({"correctness": {"rule": "reward>=1"}}) == parse_rule("reward>=1")
    assert run_rule('{"lr": 1}') == run_rule(None) == DEFAULT


def test_a_verifier_result_carries_its_own_verdict():
    from workbench.tasks.base import VerifyResult
    from workbench.tasks.verifiers import CORRECT, error_result, score_user_result

    assert CORRECT.correct and not error_result("boom").correct
    assert VerifyResult(1.1, "wrong").correct is False  # a rewarded wrong answer stays wrong
    assert VerifyResult(0.1, "correct").correct is True
    assert VerifyResult(0.0, "format only", correct=False).correct is False
    assert score_user_result(0.7).correct and not score_user_result(0.2).correct
    assert score_user_result(True).correct and not score_user_result(False).correct


def test_a_schema_4_store_opens_and_its_rollouts_are_judged_by_their_runs_rule(tmp_path):
    """A store from before `rollouts.correct`: the migration adds the column (null in the rows kept)
    and the readers judge those rows by their run's rule; an imported run keeps its rule."""
    from workbench.analysis.replay import load_run
    from workbench.store import StepRecord, open_store

    path = tmp_path / "old"
    with open_store(path) as s:
        run_id = s.create_run("old", {"correctness": {"rule": "reward>=1"}}, seed=0, status="imported", source="verl")
        s.write_step(StepRecord(run_id, 1, {}, [
            {"prompt_id": "p", "idx": i, "reward": r, "response": "x"} for i, r in enumerate([1.1, 0.1, 0.5])]))

        def to_schema_4(cur):
            cur.execute("ALTER TABLE rollouts DROP COLUMN correct")
            cur.execute("ALTER TABLE rollouts DROP COLUMN observations")
            cur.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")

        s._lake.write(to_schema_4, "as a schema-4 workbench left it")
    with open_store(path) as s:
        rolls = s.rollouts(run_id, limit=10)
        assert rolls["correct"].to_list() == [None, None, None]
        assert load_run(s, run_id).rollouts.sort("idx")["correct"].to_list() == [True, False, False]
