"""The reward in parts on the real (small) organism: configured terms reach the store per rollout and
per step, the reward is their weighted sum, the verdict stays the verifier's; DAPO's overlong penalty
on the paper's numbers; bad term configs refused with one line before anything starts."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from workbench.config import RunConfig
from workbench.engine import run
from workbench.errors import ConfigError
from workbench.store import open_store
from workbench.tasks import ArithmeticTask, ArithmeticTaskConfig
from workbench.tasks.reward_config import RewardsConfig
from workbench.tasks.rewards import overlong_penalty, score, terms_array
from f32 import f32_atol


def shortness(response, prompt, *, length, finished, verdict, **_):  # noqa: ANN001
    """A user reward term (the one the engine test imports by path): shorter is better."""
    return 1.0 / max(length, 1)


def not_a_number(response, prompt, **_):  # noqa: ANN001
    return "high"


TERMS = [
    {"kind": "verifier"},
    {"kind": "format", "pattern": r"^\d+$", "match": "full", "weight": 0.25},
    {"kind": "overlong", "buffer": 3, "weight": 0.5},
    {"kind": "function", "path": "tests.engine.test_reward_terms:shortness", "weight": -2},
]


def test_dapo_overlong_penalty_on_the_papers_lengths():
    """DAPO (Yu et al. 2025): L_max 20,480, L_cache 4,096: no penalty up to 16,384 tokens, linear to -1."""
    lengths = np.array([100, 16_384, 17_408, 18_432, 20_479, 20_480, 30_000])
    got = overlong_penalty(lengths, 20_480, 4_096)
    np.testing.assert_allclose(got, [0, 0, -0.25, -0.5, -4095 / 4096, -1, -1], rtol=0, atol=1e-12)


def test_score_is_the_weighted_sum_and_the_default_is_the_verifier_alone():
    task = ArithmeticTask(ArithmeticTaskConfig(seed=0))
    prompts = task.train_prompts()[:4]
    responses = [prompts[0].answer, prompts[1].answer + " oops", "", "12x"]
    lengths, finished = np.array([3, 6, 8, 8]), np.array([True, True, False, False])
    default = score(RewardsConfig(), task, prompts, responses, lengths, finished, max_new_tokens=8)
    verifier = np.array([task.verify(r, p).reward for r, p in zip(responses, prompts)])
    assert default.rewards.tobytes() == verifier.tobytes()  # bit for bit
    assert list(default.terms) == ["verifier"] and default.verdicts[0] == "correct"

    s = score(RewardsConfig(terms=TERMS), task, prompts, responses, lengths, finished, max_new_tokens=8)
    np.testing.assert_array_equal(s.terms["format"], [1.0 if r.isdigit() else 0.0 for r in responses])
    np.testing.assert_allclose(s.terms["overlong"], [0, -1 / 3, -1, -1])
    np.testing.assert_allclose(s.terms["shortness"], 1 / lengths)
    expected = verifier + 0.25 * s.terms["format"] + 0.5 * s.terms["overlong"] - 2 * s.terms["shortness"]
    np.testing.assert_allclose(s.rewards, expected, rtol=0, atol=1e-12)
    assert s.verdicts == default.verdicts  # whatever the terms, the verdict is the verifier's


def test_terms_array_leaves_out_missing_terms_and_nulls_rows_without_any():
    arr = terms_array({"a": np.array([1.0, np.nan, np.nan]), "b": np.array([0.5, 2.0, np.nan])}, 3)
    assert arr.to_pylist() == [[("a", 1.0), ("b", 0.5)], [("b", 2.0)], None]
    assert terms_array({}, 2).to_pylist() == [None, None]


@pytest.mark.parametrize("terms, message", [
    ([{"kind": "fromat"}], "rewards.terms[0].kind: 'fromat' is not allowed (a reward term: verifier, format, "
                           "overlong, function)"),
    ([{"kind": "verifier"}, {"kind": "format", "pattern": "x", "weight": "0.5"}],
     "rewards.terms[1].weight: '0.5' is not allowed (must be a number)"),
    ([{"kind": "function", "path": "no_such_module_xyz:f"}],
     "rewards.terms[0].path: cannot import module 'no_such_module_xyz'"),
    ([{"kind": "function", "path": "tests.engine.test_reward_terms:nope"}],
     "rewards.terms[0].path: 'tests.engine.test_reward_terms' has no callable 'nope'"),
    ([{"kind": "overlong", "buffer": 9}], "rewards.terms[0].buffer: 9 is not allowed (at most the length limit "
                                          "sampling.max_new_tokens = 8)"),
    ([{"kind": "format", "pattern": "(("}], "rewards.terms[0].pattern: '((' is not allowed (not a regular "
                                            "expression"),
    ([{"kind": "verifier"}, {"kind": "verifier", "weight": 2}], "rewards.terms[1].name: 'verifier' is not allowed "
                                                                "(a name no earlier term uses"),
    ([], "rewards.terms: [] is not allowed"),
])
def test_bad_terms_are_refused_naming_the_field(terms, message):
    with pytest.raises(ConfigError) as exc:
        RunConfig.from_dict({"rewards": {"terms": terms}})
    assert str(exc.value).startswith(message)
    assert "\n" not in str(exc.value)


def test_bad_term_on_the_command_line_is_one_line_and_starts_nothing(tmp_path):
    store = tmp_path / "store"
    out = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "run", "--store", str(store), "--quiet",
         "--set", 'rewards.terms=[{kind = "verifier", weight = "heavy"}]'],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip().splitlines()[-1].endswith(
        "rewards.terms[0].weight: 'heavy' is not allowed (must be a number)")
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (store / "catalog.sqlite").exists()  # no store, no run row


def test_a_run_stores_each_rollouts_terms_and_their_step_means(store_dir, tiny_config):
    cfg = tiny_config(steps=2, eval__every=0, eval__at_start=False, sampling__max_new_tokens=6,
                      rewards={"terms": TERMS})
    run_id = run(cfg, store=str(store_dir))
    with open_store(store_dir) as st:
        rows = st.sql("SELECT step, reward, verdict, length, response, reward_terms FROM rollouts "
                      "WHERE run_id = ? ORDER BY step, stage, prompt_id, idx", [run_id])
        steps = st.run_steps(run_id)
    assert rows.height == 2 * 32
    terms = pl.DataFrame([dict(t) for t in rows["reward_terms"].to_list()])
    assert terms.columns == ["verifier", "format", "overlong", "shortness"]
    np.testing.assert_array_equal(terms["verifier"], (rows["verdict"] == "correct").cast(float))
    np.testing.assert_allclose(terms["shortness"], 1 / rows["length"].to_numpy())
    np.testing.assert_allclose(terms["overlong"], overlong_penalty(rows["length"].to_numpy(), 6, 3))
    weighted = terms["verifier"] + 0.25 * terms["format"] + 0.5 * terms["overlong"] - 2 * terms["shortness"]
    np.testing.assert_allclose(rows["reward"], weighted, rtol=0, atol=f32_atol(4.0, 4))  # reward is FLOAT
    for step, metrics in zip(steps["step"].to_list(), steps["metrics"].to_list()):
        m = dict(metrics)
        mine = terms.filter(rows["step"] == step)
        for name in terms.columns:
            assert m[f"reward/{name}"] == pytest.approx(float(mine[name].mean()), abs=1e-12)


def test_a_function_term_that_returns_no_number_stops_the_run_naming_it(store_dir, tiny_config):
    from workbench.errors import WorkbenchError

    cfg = tiny_config(steps=1, eval__at_start=False, rewards={"terms": [
        {"kind": "verifier"}, {"kind": "function", "path": "tests.engine.test_reward_terms:not_a_number"}]})
    with pytest.raises(WorkbenchError, match=r"reward term 'not_a_number' \(tests.engine.test_reward_terms:"
                                             r"not_a_number\) returned 'high' on prompt"):
        run(cfg, store=str(store_dir))


def test_terms_round_trip_through_config_show(tmp_path):
    from workbench.config import load_config
    from workbench.config_docs import to_toml

    cfg = RunConfig.from_dict({"rewards": {"terms": TERMS}})
    path = tmp_path / "shown.toml"
    path.write_text(to_toml(cfg))
    again = load_config(path)
    assert again == cfg and [t.name for t in again.rewards.parsed()] == ["verifier", "format", "overlong", "shortness"]


def test_the_launch_form_refuses_a_function_term_but_takes_the_others():
    from workbench.control.launch import check_overrides
    from workbench.errors import ControlError

    ok = check_overrides(['rewards.terms=[{kind = "verifier"}, {kind = "overlong", buffer = 2}]'])
    assert ok == ['rewards.terms=[{kind = "verifier"}, {kind = "overlong", buffer = 2}]']
    for line in ['rewards.terms=[{kind = "function", path = "os:getcwd"}]',
                 'rewards.terms=[{kind = "funct\\u0069on", path = "os:getcwd"}]',  # a TOML escape
                 'rewards={terms = [{kind = "verifier"}, {kind = "function", path = "os:getcwd"}]}']:
        with pytest.raises(ControlError, match="a function term .* is named in the config file"):
            check_overrides([line])
