"""Loading local model directories: a tiny model saved here loads; bad directories fail clearly."""

from __future__ import annotations

import json

import pytest
import torch

from workbench.errors import DataError
from workbench.models import check_prompt_fits, load_model
from workbench.models.tokenizer import BOS_ID, EOS_ID, PAD_ID, build_char_tokenizer


def _save_tiny(path, vocab_size=18, positions=32, with_tokenizer=True):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=positions,
                         bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)
    LlamaForCausalLM(config).save_pretrained(path)
    if with_tokenizer:
        build_char_tokenizer(model_max_length=positions).save_pretrained(path)
    return path


def test_tiny_model_loads_and_generates(tmp_path):
    model, tok = load_model(_save_tiny(tmp_path / "m"))
    assert not model.training and tok.padding_side == "left"
    ids = tok("12+3=", return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert out.shape == (1, ids.shape[1] + 3)


def test_missing_and_not_a_model(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_model(tmp_path / "nope")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(DataError, match="not a directory"):
        load_model(tmp_path / "file.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no config.json"):
        load_model(tmp_path / "empty")
    (tmp_path / "noweights").mkdir()
    (tmp_path / "noweights" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(DataError, match="has no weights"):
        load_model(tmp_path / "noweights")


def test_not_a_causal_lm(tmp_path):
    from transformers import ViTConfig, ViTModel

    ViTModel(ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                       image_size=8, patch_size=4)).save_pretrained(tmp_path / "vit")
    with pytest.raises(DataError, match="not a causal LM"):
        load_model(tmp_path / "vit")


def test_tokenizer_mismatch_and_missing(tmp_path):
    with pytest.raises(DataError, match="tokenizer does not match the model: 18 tokens but the embedding table has 10"):
        load_model(_save_tiny(tmp_path / "small-vocab", vocab_size=10))
    with pytest.raises(DataError, match="tokenizer"):
        load_model(_save_tiny(tmp_path / "no-tok", with_tokenizer=False))


def test_check_prompt_fits(tmp_path):
    model, tok = load_model(_save_tiny(tmp_path / "m", positions=16))
    check_prompt_fits(tok, model, tok("1234+5678=")["input_ids"], max_new_tokens=5)  # 11 + 5 = 16 fits
    with pytest.raises(DataError, match=r"11 tokens \+ max_new_tokens=6 = 17 exceeds the model's 16 positions"):
        check_prompt_fits(tok, model, tok("1234+5678=")["input_ids"], max_new_tokens=6)
