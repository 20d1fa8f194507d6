"""Multi-turn decoding (`workbench.rollout.episode_decode`): a one-turn episode is `HFBackend.generate`'s
rollout, the cache carried across turns gives the log-probs of a full forward pass over the episode,
tool timing never changes the tokens, tool results are fed and never trained on, and each limit ends an
episode under its own name."""

from __future__ import annotations

import random
import time

import pytest
import torch

from workbench.episodes import ToolCall
from workbench.errors import WorkbenchError
from workbench.rollout.base import SamplingParams
from workbench.rollout.episode_decode import EpisodeLimits, decode_episodes, to_episodes
from workbench.rollout.hf import HFBackend, sampling_logprobs
from f32 import assert_f32_close

SAMPLE = SamplingParams(temperature=1.0, max_new_tokens=10)


def _digits(tokenizer) -> list[int]:
    return [tokenizer.convert_tokens_to_ids(c) for c in "0123456789"]


def _tool(result: str = "42", sleep: bool = False, error: str | None = None):
    def run(text: str) -> ToolCall:
        if sleep:
            time.sleep(random.random() * 0.02)  # the calls finish in another order each run
        return ToolCall("calc", text, result, error=error, seconds=0.001)
    return run


def _result_tokens(tokenizer):
    return lambda call: tokenizer.encode("=" + call.result, add_special_tokens=False)


def test_a_one_turn_episode_is_the_single_turn_rollout(model, tokenizer, prompts):
    backend = HFBackend(model, tokenizer, compact_below=0.0)
    rows = [p for p in prompts for _ in range(3)]
    seeds = [7 + i // 3 for i in range(len(rows))]
    want = backend.generate(rows, SAMPLE, seeds=seeds)
    limits = EpisodeLimits(turn_tokens=10, max_model_tokens=10, max_total_tokens=10)
    got = decode_episodes(backend, rows, SAMPLE, limits=limits, call_end_ids=[], run_tool=_tool(),
                          result_tokens=_result_tokens(tokenizer), seeds=seeds)
    for i, turns in enumerate(got.turns):
        assert len(turns) == 1 and turns[0].role == "assistant"
        n = int(want.lengths[i])
        assert turns[0].tokens == want.tokens[i, :n].tolist()
        assert_f32_close(torch.tensor(turns[0].logprobs), want.logprobs[i, :n], terms=18)
        assert got.finish_reasons[i] == ("stop" if bool(want.finished[i]) else "length")


def _full_logprobs(model, prompt: list[int], turns, sampling) -> list[float]:
    """Log-probs of every sampled token from ONE forward pass over the whole episode (no cache)."""
    seq = list(prompt) + [t for turn in turns for t in turn.tokens]
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([seq])).logits[0]
    logp = sampling_logprobs(logits, sampling)
    out, pos = [], len(prompt)
    for turn in turns:
        for tok in turn.tokens:
            if turn.role == "assistant":
                out.append(float(logp[pos - 1, tok]))
            pos += 1
    return out


def test_the_cache_across_turns_gives_a_full_forward_pass(model, tokenizer, prompts):
    backend = HFBackend(model, tokenizer)
    rows = [p for p in prompts for _ in range(2)]
    limits = EpisodeLimits(turn_tokens=6, max_turns=4, max_tool_calls=3, max_model_tokens=20, max_total_tokens=40)
    batch = decode_episodes(backend, rows, SAMPLE, limits=limits, call_end_ids=_digits(tokenizer),
                            run_tool=_tool("73", sleep=True), result_tokens=_result_tokens(tokenizer),
                            seeds=list(range(len(rows))))
    calls = sum(t.role == "tool" for turns in batch.turns for t in turns)
    assert calls >= len(rows)  # the random model says a digit soon in almost every turn
    for prompt, turns in zip(rows, batch.turns):
        got = [lp for t in turns if t.role == "assistant" for lp in t.logprobs]
        want = _full_logprobs(model, prompt, turns, SAMPLE)
        assert_f32_close(torch.tensor(got), torch.tensor(want), terms=64)
        for t in turns:
            if t.role == "tool":
                assert t.tokens == tokenizer.encode("=73", add_special_tokens=False) and not t.logprobs


def test_tool_timing_never_changes_the_tokens(model, tokenizer, prompts):
    backend = HFBackend(model, tokenizer)
    limits = EpisodeLimits(turn_tokens=5, max_turns=3, max_tool_calls=2, max_model_tokens=15, max_total_tokens=30)
    runs = [decode_episodes(backend, prompts, SAMPLE, limits=limits, call_end_ids=_digits(tokenizer),
                            run_tool=_tool(sleep=True), result_tokens=_result_tokens(tokenizer),
                            seeds=[3] * len(prompts)) for _ in range(2)]
    assert [[t.tokens for t in row] for row in runs[0].turns] == [[t.tokens for t in row] for row in runs[1].turns]
    assert runs[0].finish_reasons == runs[1].finish_reasons


def test_episodes_mask_every_tool_token_and_name_the_limit_that_ended_them(model, tokenizer, prompts):
    backend = HFBackend(model, tokenizer)
    calls_only = EpisodeLimits(turn_tokens=5, max_turns=10, max_tool_calls=2, max_model_tokens=60, max_total_tokens=200)
    batch = decode_episodes(backend, prompts, SAMPLE, limits=calls_only, call_end_ids=_digits(tokenizer),
                            run_tool=_tool(), result_tokens=_result_tokens(tokenizer), seeds=[1] * len(prompts))
    texts = [tokenizer.decode(p) for p in prompts]
    eps = to_episodes(batch, texts, prompts, tokenizer.decode)
    for ep, reason in zip(eps, batch.finish_reasons):
        ep.validate()
        assert reason in ("stop", "length", "tool_calls")
        mask = ep.loss_mask()
        flat = [(t.role, m) for t in ep.response_turns for m in t.trained()]
        assert [m for _, m in flat] == mask
        assert not any(m for role, m in flat if role == "tool") and len(ep.tool_calls) <= 2
    assert "tool_calls" in batch.finish_reasons  # a model that never stops calling is stopped
    tight = EpisodeLimits(turn_tokens=5, max_turns=2, max_tool_calls=5, max_model_tokens=60, max_total_tokens=200)
    turns = decode_episodes(backend, prompts, SAMPLE, limits=tight, call_end_ids=_digits(tokenizer),
                            run_tool=_tool(), result_tokens=_result_tokens(tokenizer), seeds=[1] * len(prompts))
    assert "turns" in turns.finish_reasons
    assert all(sum(t.role == "assistant" for t in row) <= 2 for row in turns.turns)
    tokens = EpisodeLimits(turn_tokens=5, max_turns=9, max_tool_calls=9, max_model_tokens=4, max_total_tokens=200)
    few = decode_episodes(backend, prompts, SAMPLE, limits=tokens, call_end_ids=_digits(tokenizer),
                          run_tool=_tool(), result_tokens=_result_tokens(tokenizer), seeds=[1] * len(prompts))
    assert all(n <= 4 for n in few.model_tokens)
    total = EpisodeLimits(turn_tokens=5, max_turns=9, max_tool_calls=9, max_model_tokens=60, max_total_tokens=6)
    short = decode_episodes(backend, prompts, SAMPLE, limits=total, call_end_ids=_digits(tokenizer),
                            run_tool=_tool("123456"), result_tokens=_result_tokens(tokenizer), seeds=[1] * len(prompts))
    assert "total_tokens" in short.finish_reasons


def test_a_tool_runner_that_raises_becomes_a_result_the_model_sees(model, tokenizer, prompts):
    def boom(text: str) -> ToolCall:
        raise RuntimeError("the tool fell over")

    backend = HFBackend(model, tokenizer)
    limits = EpisodeLimits(turn_tokens=5, max_turns=3, max_tool_calls=2, max_model_tokens=20, max_total_tokens=60)
    batch = decode_episodes(backend, prompts, SAMPLE, limits=limits, call_end_ids=_digits(tokenizer),
                            run_tool=boom, result_tokens=_result_tokens(tokenizer), seeds=[2] * len(prompts))
    calls = [t.call for row in batch.turns for t in row if t.role == "tool"]
    assert calls and all(c.error == "raised" and "the tool fell over" in c.result for c in calls)


@pytest.mark.parametrize("field, value", [("turn_tokens", 0), ("max_turns", 0), ("max_tool_calls", -1),
                                          ("max_model_tokens", 0), ("max_total_tokens", 0)])
def test_limits_out_of_range_are_refused_naming_the_field(field, value):
    with pytest.raises(WorkbenchError, match=f"episodes.{field} must be"):
        EpisodeLimits(**{field: value})


def test_episodes_report_their_progress_to_the_in_flight_channel(model, tokenizer, prompts, tmp_path):
    """With the run's in-flight channel on the backend, the episode loop reports as plain decoding does:
    at its end every row finished, its tokens (tool results included) counted, a few rows' text shown."""
    from workbench.store.inflight import InflightChannel, read_inflight

    backend = HFBackend(model, tokenizer)
    backend.progress = InflightChannel(tmp_path, "run-1", every_s=0.0, decode=lambda ids: "x" * len(ids))
    rows = [p for p in prompts for _ in range(2)]
    limits = EpisodeLimits(turn_tokens=6, max_turns=3, max_tool_calls=2, max_model_tokens=12, max_total_tokens=24)
    batch = decode_episodes(backend, rows, SAMPLE, limits=limits, call_end_ids=_digits(tokenizer),
                            run_tool=_tool("7"), result_tokens=_result_tokens(tokenizer), seeds=list(range(len(rows))))
    report = read_inflight(tmp_path, "run-1")
    assert report.problem is None and report.row["state"] == "idle"
    assert report.row["rows"] == report.row["finished"] == len(rows)
    assert report.row["tokens"] == sum(len(t.tokens) for turns in batch.turns for t in turns)
    assert report.row["samples"] and all(s["text"] == "x" * s["tokens"] for s in report.row["samples"])


def test_a_tool_turn_lasts_from_its_call_until_its_result_reached_the_loop(model, tokenizer, prompts):
    def slow(text: str) -> ToolCall:
        time.sleep(0.03)
        return ToolCall("calc", text, "5", seconds=0.03)

    backend = HFBackend(model, tokenizer)
    limits = EpisodeLimits(turn_tokens=6, max_turns=3, max_tool_calls=2, max_model_tokens=20, max_total_tokens=40)
    batch = decode_episodes(backend, list(prompts), SAMPLE, limits=limits, call_end_ids=_digits(tokenizer),
                            run_tool=slow, result_tokens=_result_tokens(tokenizer), seeds=list(range(len(prompts))))
    tools = [t for turns in batch.turns for t in turns if t.role == "tool"]
    if not tools:  # the random model says a digit soon in almost every turn: a draw, so never asserted
        pytest.skip("no call drawn on this machine")
    for t in tools:  # what the call added: at least the tool's own time; the turn runs on while it is fed
        assert 0.03 <= t.result_s <= t.seconds and t.started_s + t.seconds <= batch.gen_time_s


@pytest.mark.parametrize("total", [5, 7, 9])
def test_rows_ending_on_a_result_token_leave_the_batch_without_touching_the_waiting_rows(model, tokenizer, prompts,
                                                                                         total):
    # every finished row leaves the batch at once (compact_below=1), rows end on a result token
    # (max_total_tokens), and the tools finish in a random order: the rows still waiting for theirs
    # must keep exactly the positions and cache a full forward pass gives
    backend = HFBackend(model, tokenizer, compact_below=1.0)
    rows = [p for p in prompts for _ in range(4)]
    limits = EpisodeLimits(turn_tokens=4, max_turns=4, max_tool_calls=3, max_model_tokens=20, max_total_tokens=total)
    for _ in range(3):
        batch = decode_episodes(backend, rows, SAMPLE, limits=limits, call_end_ids=_digits(tokenizer),
                                run_tool=_tool("73", sleep=True), result_tokens=_result_tokens(tokenizer),
                                seeds=list(range(len(rows))))
        for prompt, turns in zip(rows, batch.turns):
            got = [lp for t in turns if t.role == "assistant" for lp in t.logprobs]
            assert_f32_close(torch.tensor(got), torch.tensor(_full_logprobs(model, prompt, turns, SAMPLE)), terms=64)
