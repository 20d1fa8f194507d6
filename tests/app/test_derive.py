"""The pure frame helpers behind the pages, on hand-made frames."""

import math
from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from app import derive, rollout_view


def test_passk_by_step_is_the_unbiased_estimator_averaged_over_prompts():
    ev = pl.DataFrame({"step": [0, 0, 4, 4], "prompt_id": ["a", "b", "a", "b"],
                       "samples": [4, 4, 4, 4], "correct": [0, 2, 1, 4]})
    pk = derive.passk_by_step(ev)
    assert sorted(pk["k"].unique().to_list()) == [1, 2, 4]
    p = {(r["step"], r["k"]): r["pass_at_k"] for r in pk.to_dicts()}
    assert math.isclose(p[(0, 1)], (0 + 0.5) / 2)
    # pass@2 with 2 of 4 correct: 1 - C(2,2)/C(4,2) = 5/6
    assert math.isclose(p[(0, 2)], (0 + 5 / 6) / 2)
    assert math.isclose(p[(4, 4)], 1.0)
    assert derive.passk_by_step(pl.DataFrame()).is_empty()


def test_regime_changes_label_budget_and_allocator_switches():
    steps = pl.DataFrame({"step": [0, 1, 2, 3, 4], "budget": [64, 64, 32, 32, 32],
                          "budget_kind": ["rollouts"] * 5,
                          "allocator": ["uniform", "uniform", "uniform", "multistage", "multistage"],
                          "allocator_params": ["{}", "{}", "{}", "{}", '{"n": 4}']})
    assert derive.regime_changes(steps) == [
        {"step": 2, "label": "budget 32 rollouts"},
        {"step": 3, "label": "allocator multistage"},
        {"step": 4, "label": "multistage params"},
    ]


def test_run_summary_one_row_per_run():
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    runs = pl.DataFrame({"run_id": ["a", "b"], "name": ["A", "B"], "status": ["running", "finished"],
                         "created_at": [t0, t0 + timedelta(minutes=1)],
                         "updated_at": [t0 + timedelta(seconds=90), t0 + timedelta(minutes=2)],
                         "heartbeat_at": [t0 + timedelta(seconds=100), None],
                         "config": ['{"allocator": {"name": "uniform"}}', '{"allocator": {"name": "selective"}}'],
                         "steps": [2, 0], "last_step": [1, None]})
    steps = pl.DataFrame({"run_id": ["a", "a"], "step": [0, 1], "tokens_generated": [100, 50],
                          "step_time_s": [1.0, 2.0], "allocator": ["uniform", "multistage"]})
    s = derive.run_summary(runs, steps, {"a": 0.4})
    rows = {r["run_id"]: r for r in s.to_dicts()}
    assert rows["a"]["steps"] == 2 and rows["a"]["tokens"] == 150 and rows["a"]["allocator"] == "multistage"
    assert rows["a"]["best_pass1"] == 0.4 and rows["a"]["wall_time_s"] == 100.0
    assert rows["b"]["steps"] == 0 and rows["b"]["allocator"] == "selective" and rows["b"]["best_pass1"] is None
    assert s["run_id"].to_list() == ["b", "a"]  # newest first


def test_budget_histogram_and_calibration():
    allocs = pl.DataFrame({"step": [1, 1, 1, 1], "stage": [0, 0, 1, 0], "prompt_id": ["a", "b", "a", "c"],
                           "granted": [8, 8, 16, 8], "budget": [64] * 4, "budget_kind": ["rollouts"] * 4,
                           "predicted_pass": [0.2, 0.9, None, 0.5]})
    used = derive.budget_used(allocs)
    assert used.to_dicts() == [{"step": 1, "stage": 0, "granted": 24, "budget": 64},
                               {"step": 1, "stage": 1, "granted": 16, "budget": 64}]
    assert sorted(derive.rollouts_per_prompt(allocs)) == [8, 8, 24]
    rollouts = pl.DataFrame({"step": [1] * 6, "prompt_id": ["a", "a", "a", "a", "b", "b"],
                             "reward": [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]})
    pairs = derive.calibration_pairs(allocs, rollouts).sort("prompt_id")
    assert pairs.select("prompt_id", "predicted", "observed", "n").rows() == [("a", 0.2, 0.25, 4), ("b", 0.9, 1.0, 2)]


def test_compare_curves_put_passk_on_tokens_and_wall_time():
    steps = pl.DataFrame({"step": [0, 1, 2], "tokens_generated": [10, 10, 10], "step_time_s": [1.0, 1.0, 2.0]})
    ev = pl.DataFrame({"step": [0, 2], "prompt_id": ["a", "a"], "samples": [2, 2], "correct": [1, 2]})
    c = derive.compare_curves({"run A": (steps, ev)})
    p1 = c.filter(pl.col("k") == 1).sort("step")
    assert p1.select("tokens", "wall_s", "pass_at_k").rows() == [(10, 1.0, 0.5), (30, 4.0, 1.0)]
    assert set(c["run"]) == {"run A"}


def test_the_evaluation_before_the_first_step_sits_at_zero_tokens():
    """Our engine numbers training steps from 1 and evaluates at step 0 first: that point belongs at 0
    tokens and 0 s (it was dropped from the Compare page's curves)."""
    steps = pl.DataFrame({"step": [1, 2], "tokens_generated": [10, 10], "step_time_s": [1.0, 2.0]})
    ev = pl.DataFrame({"step": [0, 2], "prompt_id": ["a", "a"], "samples": [2, 2], "correct": [1, 2]})
    p1 = derive.compare_curves({"run A": (steps, ev)}).filter(pl.col("k") == 1).sort("step")
    assert p1.select("step", "tokens", "wall_s", "pass_at_k").rows() == [(0, 0, 0.0, 0.5), (2, 20, 3.0, 1.0)]
    untimed = steps.with_columns(pl.lit(None, dtype=pl.Float64).alias("step_time_s"))
    assert derive.cumulative_axes(untimed).rows() == [(0, 0, None), (1, 10, None), (2, 20, None)]


def test_token_html_escapes_every_piece():
    pieces = rollout_view.token_pieces("<script>alert(1)</script>", list(range(25)), None)
    assert len(pieces) == 25  # one character per token when the lengths agree
    out = rollout_view.token_html(pieces, [0.1] * 25)
    assert "<script>" not in out and "&lt;" in out and "&gt;" in out
    assert out.count("<span ") == 25
    # a tokenizer wins over the character split
    assert rollout_view.token_pieces("ab", [7, 8], lambda ids, special: "".join(f"<{i}>" for i in ids)) == ["<7>", "<8>"]
    # lengths that disagree and no tokenizer: the whole response, uncoloured
    assert rollout_view.token_pieces("abc", [1], None) == ["abc"]
    assert "<span>abc</span>" in rollout_view.token_html(["abc"], [0.5, 0.7])


def test_group_html_escapes_fields_and_groups_keep_order():
    rows = [{"step": 3, "prompt_id": "p<1>", "idx": i, "stage": 0, "policy_version": 3, "reward": 1.0,
             "verdict": "'; DROP TABLE rollouts; --", "advantage": 0.5, "length": 2, "entropy_mean": 0.2,
             "response": "<b", "token_ids": [1, 2], "token_entropy": [0.1, 1.9]} for i in range(2)]
    out = rollout_view.group_html(rows)
    assert ">&lt;</span>" in out and "<b" not in out
    assert "&#x27;; DROP TABLE rollouts; --" in out
    assert "+0.500" in out
    groups = rollout_view.group_rollouts(pl.DataFrame(rows + [{**rows[0], "prompt_id": "q"}]))
    assert [(g[0], g[1], len(g[2])) for g in groups] == [(3, "p<1>", 2), (3, "q", 1)]
    assert "&lt;1&gt;" in rollout_view.group_header(3, "p<1>", rows, "1+1=")


def test_entropy_colour_runs_white_to_red():
    assert rollout_view.entropy_colour(0.0, 2.0) == "rgb(255,255,255)"
    assert rollout_view.entropy_colour(5.0, 2.0) == "rgb(255,105,35)"


def test_entropy_window_and_quantiles():
    steps = pl.DataFrame({"step": [0, 1, 2, 3], "rollouts": [10, 10, 10, 10]})
    assert derive.window_start(steps, 25) == 2
    assert derive.window_start(steps, 5) == 3  # never less than the last step
    assert derive.window_start(steps, 1000) == 0
    frame = pl.DataFrame({"step": [0] * 11 + [1], "entropy_mean": [float(i) for i in range(11)] + [7.0]})
    q = derive.step_quantiles(frame, "entropy_mean")
    got = {(r["step"], r["q"]): r["value"] for r in q.to_dicts()}
    assert got[(0, "p10")] == 1.0 and got[(0, "p50")] == 5.0 and got[(0, "p90")] == 9.0
    assert got[(1, "p50")] == 7.0


def test_budget_used_from_steps_splits_later_stages():
    steps = pl.DataFrame({"step": [1, 2], "rollouts": [32, 40], "budget": [64, 64], "budget_kind": ["rollouts"] * 2,
                          "metrics": [{"alloc/stage2_rollouts": 0.0}, {"alloc/stage2_rollouts": 8.0}]})
    used = derive.budget_used_from_steps(steps)
    assert used.rows() == [(1, 0, 32, 64), (2, 0, 32, 64), (2, 1, 8, 64)]


def test_what_the_rollouts_tell_when_no_decision_was_logged():
    rewards = pl.DataFrame({"step": [3] * 7, "prompt_id": ["a"] * 4 + ["b"] * 3,
                            "reward": [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0], "stage": [0] * 7})
    groups = derive.group_pass_rates(rewards)
    assert groups.select("prompt_id", "rollouts", "correct", "zero_signal").rows() == [("a", 4, 3, False),
                                                                                       ("b", 3, 0, True)]
    assert groups["pass_rate"].to_list() == [0.75, 0.0]
    assert derive.busiest_prompt(rewards) == "a" and derive.busiest_prompt(rewards.clear()) is None
    later = rewards.with_columns(pl.lit(9, dtype=pl.Int64).alias("step"), pl.lit(1, dtype=pl.Int64).alias("stage"))
    two_steps = pl.concat([rewards, later])
    visits = derive.prompt_visits(two_steps.filter(pl.col("prompt_id") == "a"))
    assert visits.rows() == [(3, 4, 1, 3, 0.75), (9, 4, 1, 3, 0.75)]
    assert derive.prompt_visits(rewards.clear()).columns == ["step", "granted", "stages", "correct", "last_pass"]


def test_runs_without_step_times_have_no_wall_time_and_every_run_has_its_source():
    steps = pl.DataFrame({"step": [0, 1], "tokens_generated": [10, 20], "step_time_s": [None, None],
                          "reward_mean": [0.1, 0.3]}, schema_overrides={"step_time_s": pl.Float64})
    axes = derive.cumulative_axes(steps)
    assert axes["tokens"].to_list() == [10, 30] and axes["wall_s"].null_count() == 2
    curves = derive.reward_curves({"verl run": steps})
    assert curves.rows() == [("verl run", 0, 10, 0.1), ("verl run", 1, 30, 0.3)]
    t0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
    runs = pl.DataFrame({"run_id": ["a", "b"], "name": ["ours", "imported"], "status": ["finished", "imported"],
                         "source": [None, "verl"], "created_at": [t0, t0], "updated_at": [t0 + timedelta(seconds=90)] * 2})
    both = pl.concat([steps.with_columns(pl.lit("b").alias("run_id")),
                      steps.with_columns(pl.lit("a").alias("run_id"), pl.lit(2.0).alias("step_time_s"))])
    table = derive.run_summary(runs, both.with_columns(pl.lit(None, dtype=pl.Utf8).alias("allocator")), {})
    row = {r["run_id"]: r for r in table.to_dicts()}
    assert row["a"]["source"] == derive.OWN_SOURCE and row["b"]["source"] == "verl"
    assert row["a"]["train_time_s"] == 4.0 and row["a"]["wall_time_s"] == 90.0
    assert row["b"]["train_time_s"] is None and row["b"]["wall_time_s"] is None  # not timed: no 0 shown


def _bpe(pre, decoder, texts):
    """A real subword tokenizer (the `tokenizers` library's BPE) trained on `texts`."""
    from tokenizers import Tokenizer, models, trainers

    tok = Tokenizer(models.BPE(unk_token=None if decoder == "bytes" else "<unk>"))
    from tokenizers import decoders, pre_tokenizers

    if decoder == "bytes":  # GPT-2 / SmolLM2 style: 'Ġ' for a space, 'Ċ' for a newline, byte tokens
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|im_end|>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:  # SentencePiece / Llama style: '▁' before a word
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "</s>"])
    tok.train_from_iterator(texts, trainer)
    return tok


@pytest.mark.parametrize("kind", ["bytes", "metaspace"])
def test_subword_tokens_read_as_text(kind):
    """Markers become the spaces and newlines they stand for; a character of several bytes is shown
    whole on its last byte token; the pieces join to the decoded response."""
    texts = ["the cat sat on the mat", "3 + 7 = 10", "a line\nand another"] * 20
    tok = _bpe(kind, kind, texts)
    response = "the cat = 10\nthe mat" if kind == "metaspace" else "the cat – 10 😀\nthe mat"
    ids = tok.encode(response).ids
    decode = lambda part, special=True: tok.decode(list(part), skip_special_tokens=not special)  # noqa: E731
    pieces = rollout_view.token_pieces(response, ids, decode)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == tok.decode(ids)
    assert not any(mark in "".join(pieces) for mark in "ĠĊ▁�")
    if kind == "bytes":
        assert "".join(pieces) == response
        dash = pieces.index("–") if "–" in pieces else next(i for i, p in enumerate(pieces) if "–" in p)
        assert pieces[dash - 1] == "" or len(tok.encode("–").ids) == 1  # its first bytes are empty pieces
        assert any("😀" in p for p in pieces)
    else:
        assert " cat" in pieces or any(p.startswith(" ") for p in pieces[1:])  # a word keeps its leading space


def test_special_tokens_shown_or_left_out():
    tok = _bpe("bytes", "bytes", ["10 is the answer"] * 20)
    ids = tok.encode("10").ids + [tok.token_to_id("<|im_end|>")]
    decode = lambda part, special=True: tok.decode(list(part), skip_special_tokens=not special)  # noqa: E731
    assert rollout_view.token_pieces("10", ids, decode, special=True)[-1] == "<|im_end|>"
    assert rollout_view.token_pieces("10", ids, decode, special=False)[-1] == ""
    html_out = rollout_view.group_html([{"idx": 0, "response": "10", "token_ids": ids, "token_entropy": [0.1] * len(ids)}],
                                 decode, special=True)
    assert "&lt;|im_end|&gt;" in html_out
