"""The GPU check's larger model, built here with nothing to download: a randomly initialised model of
Qwen2.5-0.5B's shape, a tokenizer built locally (the organism's characters plus filler tokens up to the
vocabulary, and a chat template, so `configs/gsm8k_local_model.toml`'s tokenizer path runs as written),
and a GSM8K-like task file in that config's format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

QWEN2_LIKE = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096,
                  tie_word_embeddings=True, rope_theta=1_000_000.0)
"""The shape of Qwen2.5-0.5B (~494M parameters), randomly initialised: no weights to download."""

CHAT_TEMPLATE = ("{% for m in messages %}{{ m['content'] }}{% endfor %}"
                 "{% if add_generation_prompt %}={% endif %}")
"""One user turn, then "=" where the answer starts (a template is what `model.chat_template` needs)."""


def qwen2_like_config(**shape: Any):
    """Qwen2.5-0.5B's shape (`shape` overrides fields: the rehearsal uses a tiny one)."""
    from transformers import Qwen2Config

    from workbench.models.tokenizer import BOS_ID, EOS_ID, PAD_ID

    return Qwen2Config(**dict(QWEN2_LIKE, **shape), bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)


def count_parameters_meta(config) -> int:
    """Parameters of a causal LM built from `config` on the meta device (no memory for weights)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def wide_char_tokenizer(vocab_size: int):
    """The organism's character tokenizer with filler tokens up to `vocab_size`, so that whatever a
    random model generates decodes (fillers read `<t123>`; they are never produced by encoding)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from workbench.models.tokenizer import BOS_ID, DEFAULT_ALPHABET, SPECIALS

    vocab = {t: i for i, t in enumerate(list(SPECIALS) + list(DEFAULT_ALPHABET))}
    vocab.update({f"<t{i}>": i for i in range(len(vocab), vocab_size)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", BOS_ID)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                  unk_token="<unk>", padding_side="left", clean_up_tokenization_spaces=False)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def save_random_model(target: Path, config) -> Path:
    """A randomly initialised bf16 model of `config` with the wide tokenizer, saved under `target`."""
    import torch
    from transformers import AutoModelForCausalLM

    if (target / "config.json").is_file():
        return target
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(target)
    wide_char_tokenizer(config.vocab_size).save_pretrained(target)
    return target


def write_gsm8k_like(path: Path, rows: int) -> Path:
    """`rows` word problems in `configs/gsm8k_local_model.toml`'s format ({"question", "answer": "... #### N"})."""
    with open(path, "w") as f:
        for i in range(rows):
            a, b = 3 + i % 17, 5 + (7 * i) % 23
            f.write(json.dumps({"question": f"Tom has {a} apples and buys {b} more. How many apples has he?",
                                "answer": f"{a}+{b}={a + b}\n#### {a + b}"}) + "\n")
    return path
