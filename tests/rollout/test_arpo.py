"""ARPO's branching (`workbench.rollout.episode_decode`, `workbench.rollout.shapes.arpo`): the branch rule and
entropy against hand-computed cases, the group plan, and on the organism a branch is its parent's episode up to
the tool result it follows, then decodes from a copy of the parent's cache (its log-probs are a full forward
pass's), with the decision that made it recorded."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.rollout.episode_decode import (Branching, EpisodeLimits, branches, decode_episodes,
                                              window_entropy)
from workbench.rollout.hf import HFBackend
from workbench.rollout.shapes.arpo import plan
from f32 import assert_f32_close
from test_episode_decode import SAMPLE, _digits, _full_logprobs, _result_tokens, _tool


@pytest.mark.parametrize("u, before, after, want", [
    (0.5, 1.0, 1.0, True),     # dH = 0: a coin flip, u <= 0.5 branches (the first decision in ARPO's code)
    (0.51, 1.0, 1.0, False),
    (0.9, 1.0, 3.0, True),     # dH = 2: 0.9 - 0.4 = 0.5
    (0.95, 1.0, 3.0, False),
    (0.25, 2.0, 1.0, True),    # entropy fell: 0.25 + 0.2 = 0.45
    (0.35, 2.0, 1.0, False),   # 0.35 + 0.2 = 0.55
    (0.0, 0.0, -10.0, False),  # clipped to 1 > 0.5
])
def test_the_branch_rule(u, before, after, want):
    assert branches(u, before, after, 0.2, 0.5) == want


def test_window_entropy_sums_the_first_tokens_over_log_vocab():
    assert window_entropy([1.0, 2.0, 3.0], 2, 10) == pytest.approx(3.0 / math.log(10))
    assert window_entropy([1.0], 20, 10) == pytest.approx(1.0 / math.log(10))
    assert window_entropy([], 20, 10) == 0.0


def test_the_plan_samples_a_share_whole_and_keeps_the_rest_as_slots():
    groups, whole = plan([5, 5, 5, 5, 9, 9, 9], 0.5)
    assert groups == {5: [0, 1, 2, 3], 9: [4, 5, 6]} and whole == {5: 2, 9: 2}  # ceil(1.5) = 2
    assert plan([3], 0.1)[1] == {3: 1}  # at least one whole episode


def test_a_branch_is_its_parent_up_to_a_tool_result_then_decodes_from_a_cache_copy(model, tokenizer, prompts):
    backend = HFBackend(model, tokenizer)
    rows = [p for p in prompts[:3] for _ in range(2)]
    seeds = [11 + i // 2 for i in range(len(rows))]
    limits = EpisodeLimits(turn_tokens=6, max_turns=4, max_tool_calls=3, max_model_tokens=20, max_total_tokens=40)
    branching = Branching(slots={s: 2 for s in set(seeds)}, window=20, alpha=0.2, threshold=1.0,  # always branch
                          vocab=len(tokenizer))
    eb = decode_episodes(backend, rows, SAMPLE, limits=limits, call_end_ids=_digits(tokenizer),
                         run_tool=_tool("73"), result_tokens=_result_tokens(tokenizer), seeds=seeds,
                         branching=branching)
    n = len(rows)
    assert len(eb.turns) == len(eb.parents) == len(eb.branch_at) == len(eb.decisions)
    born = list(range(n, len(eb.turns)))
    assert born, "the random model calls a digit soon in almost every turn: some row branches"
    root_seed = {}
    for r in range(len(eb.turns)):
        p = r
        while eb.parents[p] >= 0:
            p = eb.parents[p]
        root_seed[r] = seeds[p]
    for s in set(seeds):  # never more branches than a group's slots
        assert sum(1 for r in born if root_seed[r] == s) <= 2
    for r in born:
        parent, at = eb.parents[r], eb.branch_at[r]
        flat = [t for turn in eb.turns[r] for t in turn.tokens]
        pflat = [t for turn in eb.turns[parent] for t in turn.tokens]
        assert flat[:at] == pflat[:at]  # the shared prefix, up to and including a tool result
        ends = [sum(len(t.tokens) for t in eb.turns[r][:k + 1]) for k in range(len(eb.turns[r]))]
        k = ends.index(at)
        assert eb.turns[r][k].role == "tool"
        before, after, u, c = eb.decisions[r]
        assert math.isnan(c)  # ARPO's rule: no consecutive-round count
        asked = [t for t in eb.turns[r][:k] if t.role == "assistant" and t.tokens]
        assert before == pytest.approx(window_entropy(asked[0].entropy, 20, len(tokenizer)))
        assert after == pytest.approx(window_entropy(asked[-1].entropy, 20, len(tokenizer)))
        assert 0.0 <= u < 1.0
        # the branch's cache is a copy of the parent's: its log-probs are one forward pass over its episode
        prompt = rows[[i for i in range(n) if seeds[i] == root_seed[r]][0]]
        want = _full_logprobs(model, prompt, eb.turns[r], SAMPLE)
        got = [lp for t in eb.turns[r] if t.role == "assistant" for lp in t.logprobs]
        assert_f32_close(torch.tensor(got), torch.tensor(want), terms=64)
