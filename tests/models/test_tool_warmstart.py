"""The tool-calling warm start (workbench/models/tool_warmstart.py) on a tiny random model with SmolLM2's
tokenizer: the builder writes a model whose chat template is the shared one (Qwen 2.5's, TRL's own), and a
tool call in that format round-trips: the template's rendering of a call is what the engine parses and
feeds (tools.syntax "qwen", configs/smollm2-tools-warm.toml's result turn) and what TRL's parser reads.
The full warm start (minutes) is not run here: docs/episodes-smollm2.md has its figures."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "smollm2-tools-warm.toml"


@pytest.fixture(scope="module")
def tiny_base(smollm2_dir, tmp_path_factory) -> Path:
    """A 2-layer random Llama with SmolLM2's tokenizer (seconds to build and train)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    out = tmp_path_factory.mktemp("tiny-base")
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def built(tiny_base, tmp_path_factory) -> Path:
    from workbench.models.tool_warmstart import ToolWarmRecipe, build_tool_model

    out = tmp_path_factory.mktemp("tools-warm") / "model"
    build_tool_model(tiny_base, out, ToolWarmRecipe(steps=2, batch_size=2, train_layers=1))
    return out


def _call_segments(model_dir: Path):
    from workbench.models.loading import load_model
    from workbench.models.tool_warmstart import TEMPLATE, conversation, segments
    from workbench.tools import tool_specs

    _, tok = load_model(model_dir)
    msgs = conversation("37*48", "1776", TEMPLATE.format(a=37, b=48))
    return tok, segments(tok, msgs, tool_specs(["calculator"]))


def test_builder_writes_the_shared_template_and_its_record(built):
    from workbench.models.chat_templates import QWEN2_5

    assert (built / "chat_template.jinja").read_text(encoding="utf-8") == QWEN2_5
    meta = json.loads((built / "warmstart.json").read_text())
    assert meta["examples"] == 4 and len(meta["losses"]) == 2
    assert all(math.isfinite(x) and x > 0 for x in meta["losses"])


def test_only_the_assistant_turns_are_trained(built):
    from workbench.models.tool_warmstart import encode

    tok, parts = _call_segments(built)
    assert [train for _, train in parts] == [False, True, False, True]
    assert parts[1][0].startswith("<tool_call>\n{") and parts[1][0].endswith("</tool_call><|im_end|>")
    assert parts[3][0] == "1776<|im_end|>"
    ids, trained = encode(tok, parts)
    taught = tok.decode([i for i, t in zip(ids, trained) if t])
    assert taught == parts[1][0] + parts[3][0]


def test_a_call_round_trips_through_the_engine_format(built):
    """The template's call parses as the engine's `qwen` call, and the engine's fed result turn (the
    config's result_template around the syntax's result) continues it exactly as the template does."""
    from workbench.config import load_config
    from workbench.tools import SYNTAXES, ToolResult, parse

    _, parts = _call_segments(built)
    call_text, fed = parts[1][0], parts[2][0]
    parsed = parse(call_text, "qwen", ["calculator"])
    assert (parsed.kind, parsed.name, parsed.arguments) == ("call", "calculator", {"expression": "37*48"})
    tools = load_config(CONFIG).tools
    ours = tools.result_template.replace("{result}", SYNTAXES.get(tools.syntax).format_result(ToolResult("1776")))
    # the engine ends the call's turn at </tool_call> and feeds <|im_end|> with the result turn
    assert call_text[: parsed.end] + ours == call_text + fed


def test_trl_parses_the_call_and_feeds_the_same_result_turn(built):
    pytest.importorskip("trl")
    from trl.chat_template_utils import add_response_schema, is_chat_template_prefix_preserving, parse_response

    from workbench.tools import tool_specs

    tok, parts = _call_segments(built)
    tok = add_response_schema(tok)  # raises "Unrecognized chat template" for a template TRL does not know
    assert is_chat_template_prefix_preserving(tok)
    prompt = tok(parts[0][0], add_special_tokens=False)["input_ids"]
    message = parse_response(tok, tok(parts[1][0], add_special_tokens=False)["input_ids"], prefix=prompt,
                             tools=tool_specs(["calculator"]))
    call = message["tool_calls"][0]["function"]
    assert (call["name"], call["arguments"]) == ("calculator", {"expression": "37*48"})


def test_the_warm_source_is_cached_by_its_recipe(tmp_path):
    from workbench.errors import DataError
    from workbench.models.sources import SOURCES, cached_dir, gguf_file
    from workbench.models.tool_warmstart import ToolWarmRecipe, smollm2_tools_dir

    try:
        gguf_file()  # the key names the converted SmolLM2 it starts from
    except DataError as exc:
        pytest.skip(str(exc))
    assert "smollm2-tools" in SOURCES
    here = cached_dir("smollm2-tools", tmp_path)
    assert here == smollm2_tools_dir(tmp_path) and here.parent == tmp_path / "models"
    assert smollm2_tools_dir(tmp_path, ToolWarmRecipe(steps=3)) != here  # another recipe, another directory
