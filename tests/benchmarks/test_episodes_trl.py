"""`workbench bench episodes-trl` at its smallest, on a tiny random model with SmolLM2's tokenizer and the
shared tool template (seconds of model time; TRL's and the engine's set-up dominate): both sides run, the
prompt tokens and the tool schema are checked equal, and what it reports is consistent with what it
measured. A random model makes no well-formed call, so the report must say so loudly (the WARNING key);
the real figures (the warm-started SmolLM2, which calls) are in docs/episodes-smollm2.md."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_tool_model(smollm2_dir, tmp_path_factory) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from workbench.models.tool_warmstart import ToolWarmRecipe, build_tool_model

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    base = tmp_path_factory.mktemp("tiny-base")
    LlamaForCausalLM(cfg).save_pretrained(base)
    tok.save_pretrained(base)
    out = tmp_path_factory.mktemp("tiny-tools") / "model"
    build_tool_model(base, out, ToolWarmRecipe(steps=1, batch_size=2, train_layers=1))
    return out


def test_bench_runs_both_sides_and_reports_what_it_measured(tiny_tool_model, tmp_path):
    pytest.importorskip("trl")
    from benchmarks.episodes_trl import bench_episodes_trl

    (tmp_path / "models").mkdir()
    out = bench_episodes_trl(str(tmp_path), rounds=1, steps=1, prompts=1, episodes=2, threads=1,
                             overrides=[f'model.path="{tiny_tool_model}"', "sampling.max_new_tokens=8",
                                        "rollout.episodes.max_model_tokens=8", "rollout.episodes.max_total_tokens=8",
                                        'model.device="cpu"'])
    assert out["same_prompt_tokens"] is True and out["same_tool_schema"] is True
    assert out["steps_timed"] == {"engine": 1, "trl": 1}
    assert len(out["engine_step_s"]) == 1 and len(out["trl_step_s"]) == 1
    ours, theirs = out["engine_step_s"][0], out["trl_step_s"][0]  # each rounded to 0.01 s
    # episodes/s are rounded to 1e-4 (a step of 1.825 s reads 1.83 s and 1.0959 episodes/s)
    assert 2 / (ours + 0.005) - 5e-5 <= out["engine_episodes_per_s"] <= 2 / (ours - 0.005) + 5e-5
    assert 2 / (theirs + 0.005) - 5e-5 <= out["trl_episodes_per_s"] <= 2 / (theirs - 0.005) + 5e-5
    assert (theirs - 0.005) / (ours + 0.005) - 0.005 <= out["ratio_vs_trl"] <= (theirs + 0.005) / (ours - 0.005) + 0.005
    assert out["limits"]["max_total_tokens"] == 8 and out["limits"]["max_tool_calls"] == 2
    calls = out["tool_calls_per_episode"]
    assert out["tool_calls_on_both_sides"] == bool(calls["engine"] and calls["trl"])
    assert ("WARNING" in out) == (not out["tool_calls_on_both_sides"])
    assert 0 < out["model_tokens_per_episode"]["engine"] <= 8 and 0 < out["model_tokens_per_episode"]["trl"] <= 8
    assert len(out["load_average_1min"]) == 3  # before, after each side
