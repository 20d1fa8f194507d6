"""The arithmetic task: deterministic from its seed, disjoint splits, correct answers, validated config."""

from __future__ import annotations

import pytest

from workbench.errors import ConfigError
from workbench.tasks import ArithmeticTaskConfig, get_task, task_config_from_dict
from workbench.tasks.arithmetic import ArithmeticTask, _evaluate, level_space

SMALL = ArithmeticTaskConfig(train_size=900, eval_per_level=10)


def test_same_seed_same_prompts_and_other_seed_differs():
    a, b = get_task(SMALL), get_task(ArithmeticTaskConfig(train_size=900, eval_per_level=10))
    assert a.train_prompts() == b.train_prompts()
    assert a.eval_prompts() == b.eval_prompts()
    c = get_task(ArithmeticTaskConfig(seed=1, train_size=900, eval_per_level=10))
    assert [p.text for p in c.train_prompts()] != [p.text for p in a.train_prompts()]


def test_splits_are_disjoint_and_ids_unique():
    task = get_task(SMALL)
    train, evals = task.train_prompts(), task.eval_prompts()
    assert not {p.text for p in train} & {p.text for p in evals}
    ids = [p.id for p in train + evals]
    assert len(ids) == len(set(ids))
    assert len({p.text for p in train}) == len(train)
    assert {p.split for p in train} == {"train"} and {p.split for p in evals} == {"eval"}


def test_levels_metadata_and_answers():
    cfg = SMALL
    task = get_task(cfg)
    evals = task.eval_prompts()
    assert len(evals) == cfg.eval_per_level * len(cfg.levels)
    for p in evals + task.train_prompts():
        assert p.metadata["spec"] == cfg.levels[p.level - 1]
        expr = p.metadata["expr"]
        assert p.text == expr + "="
        assert p.answer == str(eval(expr))  # noqa: S307 - digits and + - * only
    assert {p.level for p in evals} == set(range(1, len(cfg.levels) + 1))


def test_small_level_gives_what_it_has():
    task = get_task(ArithmeticTaskConfig(levels=("1+1",), train_size=500, eval_per_level=20))
    assert len(task.eval_prompts()) == 20
    assert len(task.train_prompts()) == level_space("1+1") - 20 == 80


def test_evaluate_precedence():
    assert _evaluate("2+3*4") == 14
    assert _evaluate("10-3-2") == 5
    assert _evaluate("7*8-60") == -4


def test_verify_exact_on_prompt():
    task = get_task(SMALL)
    p = task.eval_prompts()[0]
    assert task.verify(p.answer, p).reward == 1.0
    assert task.verify(p.answer + "1", p).verdict == "wrong"
    assert task.verify("", p).verdict == "no_answer"


@pytest.mark.parametrize(
    "data, field",
    [
        ({"levels": ["2+x"]}, "task.levels[0]"),
        ({"levels": []}, "task.levels"),
        ({"levels": ["1+1", "1+1"]}, "task.levels"),
        ({"train_size": 0}, "task.train_size"),
        ({"eval_per_level": 0}, "task.eval_per_level"),
        ({"template": "no expression"}, "task.template"),
        ({"template": "{a} boxes of {e} pens"}, "task.template"),
        ({"template": '{a} then {"name": 1}'}, "task.template"),
        ({"verifier": "fuzzy"}, "task.verifier"),
        ({"kind": "arithmetic", "seeds": 3}, "seeds"),
        ({"kind": "chess"}, "task.kind"),
    ],
)
def test_bad_config_names_the_field(data, field):
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
        task_config_from_dict(data)


def test_from_dict_round_trip():
    cfg = task_config_from_dict({"kind": "arithmetic", "levels": ["1+1", "2*1"], "seed": 4})
    assert cfg == ArithmeticTaskConfig(levels=("1+1", "2*1"), seed=4)
    hash(cfg)  # frozen and hashable: the organism recipe embeds it


def test_word_problems_name_the_operands_and_only_the_last_tool_result_is_judged():
    """`{a}`, `{b}` are the expression's operands in order; a doubled brace is a literal one; under the
    "tools" profile the text after the last `</result>` or `</tool_response>` is the answer, so a right
    tool result followed by a wrong answer is wrong."""
    cfg = ArithmeticTaskConfig(profile="tools", levels=("2*2",), verifier="number",
                               template='{{"x": 1}} A shop packs {a} boxes with {b} pens each. ({expr})')
    task = ArithmeticTask(cfg)
    p = task.eval_prompts()[0]
    a, b = p.metadata["expr"].split("*")
    assert p.text == f'{{"x": 1}} A shop packs {a} boxes with {b} pens each. ({a}*{b})'
    assert int(p.answer) == int(a) * int(b)
    call = '<tool_call>{"name": "calculator"}</tool_call>user\n<tool_response>' + p.answer + "</tool_response>\n"
    assert task.verify(call + "assistant\nThe answer is " + p.answer, p).correct
    assert not task.verify(call + "assistant\nThe answer is 5", p).correct
    assert task.verify(call + "assistant\n", p).verdict == "no_answer"
    assert task.verify("<result>1</result>" + p.answer, p).correct
