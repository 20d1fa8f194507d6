"""The "number" verifier on what SmolLM2-135M-Instruct actually writes to "What is A + B? Answer with
the number only." (sampled at T=1 through its chat template, 32 new tokens; texts copied verbatim
from its output, special tokens as `decode` without skip_special_tokens shows them), and the task
template that asks it."""

from __future__ import annotations

import pytest

from workbench.tasks import ArithmeticTaskConfig, get_task, verify
from workbench.tasks.extract import number_answer

# (response, reference, correct): real responses of the model
REAL = [
    ("2 + 9 = 11<|im_end|>", "11", True),
    ("So, 2 + 9 = 11<|im_end|>", "11", True),
    ("2 + 9 = 18<|im_end|>", "11", False),
    ('The answer to the question "2 + 9" is: 17.<|im_end|>', "11", False),
    ("2 + 9 = x<|im_end|>", "11", False),  # no number after "=": the last number before it is 9
    ("The answer to 2 + 9 is 11 not 11.<|im_end|>", "11", True),
    ("1 + 4 is 5<|im_end|>", "5", True),
    ("One, 1 + 4 is mathematically considered `11`.<|im_end|>", "5", False),
    ("The answer is 8.<|im_end|>", "8", True),
    ("The answer is 8, which is the only True mathematical statement with only one truth value:\n\n"
     "1 + 7 = 8 around here<|im_end|>", "8", True),
    ("1 + 7 = 17.<|im_end|>", "8", False),
    ("Aapex smiled at the door.\n\nThe answer is 1.<|im_end|>", "8", False),
    ("1 + 7 equals 8 .<|im_end|>", "8", True),
    ('"5"<|im_end|>', "14", False),
    ("So, 0 + 7 = 8. That's a good piece of candy, another incredible feat of human ingenuity.<|im_end|>", "7", False),
    ("10<|im_end|>", "10", True),
    ("Numbered: 9 + 1 = 10<|im_end|>", "10", True),
    ("The correct answer is \"combination\" (based on previous equation  9 + 1 = 10).<|im_end|>", "10", True),
    ("The answer is A.<|im_end|>", "10", False),
    ("So the answer is -1 and when converted to a non-negative integer it is -1 * 2 = -2.<|im_end|>", "10", False),
    ("5 + 0 equals 5.<|im_end|>", "5", True),
    ("five + 0 = five<|im_end|>", "5", False),  # words are not numbers: 0 is the last one
    ("7 + 7 = 12\n\nIn this scenario, there's no need to use elaborate algebraic expressions involving numbers, "
     "and the 7 makes it", "14", False),  # cut at max_new_tokens: the number after "=" still counts
    ("If I said to you 6 + 9 = 15, I'm not altering the mathematical format with English. The answer is equal "
     "to one more", "15", True),
]


@pytest.mark.parametrize("response, reference, correct", REAL)
def test_real_responses(response, reference, correct):
    result = verify(response, reference, method="number")
    assert result.correct is correct, (response, number_answer(response))
    assert result.reward == (1.0 if correct else 0.0)


@pytest.mark.parametrize("response", ["The answer is provided in number only.<|im_end|>", "Delight in adventuring.",
                                      "", "<|im_end|>"])
def test_no_number_is_no_answer(response):
    assert number_answer(response) is None
    assert verify(response, "5", method="number").verdict == "no_answer"


@pytest.mark.parametrize("response, number", [
    ("3 + 7 = 10.", "10"), ("= 10 = 12", "12"), ("x = -3", "-3"), ("1,000", "1,000"), ("2.50 dollars", "2.50"),
    ("3/4", "3/4"), ("a = b, so 4", "4"),
])
def test_number_answer_rules(response, number):
    assert number_answer(response) == number


def test_number_compares_as_rationals():
    assert verify("It is 10.0", "10", method="number").correct
    assert verify("1,000 apples", "1000", method="number").correct
    assert not verify("10.5", "10", method="number").correct


def test_spaced_template_asks_in_words():
    task = get_task(ArithmeticTaskConfig(levels=("1+1", "2+1"), eval_per_level=4, verifier="number",
                                         template="What is {expr_spaced}? Answer with the number only."))
    prompt = task.eval_prompts()[5]
    a, b = prompt.metadata["expr"].split("+")
    assert prompt.text == f"What is {a} + {b}? Answer with the number only."
    assert task.verify(f"{a} + {b} = {prompt.answer}.", prompt).correct
    assert not task.verify(f"{a} + {b} = {int(prompt.answer) + 1}.", prompt).correct


def test_template_needs_an_expression():
    from workbench.errors import ConfigError

    with pytest.raises(ConfigError, match="task.template"):
        ArithmeticTaskConfig(template="What is it?")
