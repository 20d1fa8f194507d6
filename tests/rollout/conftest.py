"""A tiny random Llama and a character tokenizer for the rollout tests (no downloads)."""

import pytest
import torch
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHARS = list("0123456789+-*=")


def make_tokenizer():
    vocab = {t: i for i, t in enumerate(["<pad>", "<bos>", "<eos>", "<unk>"] + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>", padding_side="left")


def make_model(hidden=32, layers=2, seed=1, vocab=18):
    """Untied embeddings: a tied random model's greedy choice is mostly its last input token again.
    With seed 1 the greedy outputs of the test prompts differ and end (EOS) at different steps."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 4,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                      max_position_embeddings=64, tie_word_embeddings=False,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer()


@pytest.fixture(scope="module")
def model_factory():
    return make_model


@pytest.fixture(scope="module")
def model():
    return make_model()


@pytest.fixture(scope="module")
def prompts(tokenizer):
    texts = ["12+7=", "3=", "405+88=", "1*1=", "99-9=", "7777+1="]
    return [[tokenizer.bos_token_id] + tokenizer.encode(t, add_special_tokens=False) for t in texts]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These models are tiny: one intra-op thread is as fast, and far faster on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
