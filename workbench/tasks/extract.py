"""Final-answer extraction from free-form solutions.

Two users: file data sets (the reference answer of a GSM8K row is a whole worked solution ending in
`#### 42`; MATH-style rows end in `\\boxed{...}`), and the math verifier (a model's response is free
text whose *final* answer is compared with the reference's). Extraction is plain string scanning
(no regex backtracking on long inputs beyond linear patterns) so it stays fast on every rollout.
"""

from __future__ import annotations

import re

_HASHES = re.compile(r"####\s*(.+?)\s*$", re.MULTILINE)
_ANSWER_IS = re.compile(
    r"(?:final answer|the answer|answer)\s*(?:is|:|=)\s*:?\s*(.+?)\s*(?:$|\n)", re.IGNORECASE
)
_A_COLON = re.compile(r"(?:^|\n)\s*A\s*:\s*(.+?)\s*(?:$|\n)")
_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?|-?\.\d+")


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced; None when absent."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        # `\boxed 5` (no braces): the token after the command
        rest = text[start:].split(None, 2)
        return rest[1].strip("$ .") if len(rest) > 1 else None
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j].strip()
    return None  # unbalanced braces


def gsm8k_answer(text: str) -> str | None:
    """The answer after the last `#### ` marker (GSM8K solutions), thousands separators kept."""
    found = _HASHES.findall(text)
    return found[-1].strip() if found else None


def last_number(text: str) -> str | None:
    """The last number in `text` (integers, decimals, thousands separators, simple fractions)."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    return found[-1].strip().rstrip(",")


_TURN_END = re.compile(r"<\|[a-z_]+\|>|</s>")


def number_answer(text: str) -> str | None:
    """The numeric answer of a short response, as an instruction-tuned model writes one to "What is
    3 + 7? Answer with the number only.": the first number after the last "=" ("3 + 7 = 10.",
    "So, 3 + 7 = 10. Easy!"), else the last number ("The answer is 10", "10"); None when there is no
    number ("The answer is ten"). Special tokens left in the text ("<|im_end|>") are ignored.

    Known leniency: a response that only restates "0 + 6" gets 6, the answer when one operand is 0."""
    text = _TURN_END.sub(" ", text)
    head, eq, tail = text.rpartition("=")
    if eq:
        found = _NUMBER.search(tail)
        if found is not None:
            return found.group(0).strip().rstrip(",")
        text = head
    return last_number(text)


def final_answer(text: str) -> str | None:
    """The final answer of a free-form response, by precedence.

    `\\boxed{x}`, then `#### x`, then `The answer is x` / `Answer: x` / `A: x` (last one), then the last
    number; a short response with none of these (e.g. "x+1") is returned whole. None when empty.
    """
    text = text.strip()
    if not text:
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    hashes = gsm8k_answer(text)
    if hashes is not None:
        return hashes
    for pattern in (_ANSWER_IS, _A_COLON):
        found = pattern.findall(text)
        if found:
            return found[-1].strip().rstrip(".").strip()
    number = last_number(text)
    if number is not None:
        return number
    if len(text) <= 32 and "\n" not in text:
        return text.rstrip(".")
    return None


def reference_answer(text: str, mode: str = "auto") -> str | None:
    """The reference answer of a data set row under extraction `mode`.

    - "auto": `#### x` when present, else the last `\\boxed{x}`, else the whole (stripped) text
    - "gsm8k": `#### x` (None when absent); "boxed": the last `\\boxed{x}` (None when absent)
    - "none": the whole stripped text
    """
    text = text.strip()
    if mode == "none":
        return text or None
    if mode in ("auto", "gsm8k"):
        found = gsm8k_answer(text)
        if found is not None or mode == "gsm8k":
            return found
    if mode in ("auto", "boxed"):
        found = last_boxed(text)
        if found is not None or mode == "boxed":
            return found
    return text or None
