"""The organism's character-level tokenizer, built locally with the `tokenizers` library.

One token per character of a small alphabet (digits, + - * =) plus `<pad> <bos> <eos> <unk>`. It is
saved as an ordinary Hugging Face tokenizer directory (`tokenizer.json` + config), so
`AutoTokenizer.from_pretrained(dir)` loads it, with:

- a post-processor that prepends `<bos>` (TRL and other trainers tokenise with `tokenizer(text)`
  and expect the model's start token to be added for them);
- left padding, so a batch of prompts ends where generation starts;
- a decoder that joins characters without spaces, so `decode(encode(s)) == s`.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)
DEFAULT_ALPHABET = "0123456789+-*="


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET, model_max_length: int = 64):
    """A `PreTrainedTokenizerFast` with one id per character of `alphabet` (ids after the specials)."""
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in alphabet:
        if ch in vocab or ch.isspace():
            raise ValueError(f"alphabet: character {ch!r} repeats or is whitespace")
        vocab[ch] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", BOS_ID)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def char_ids(alphabet: str = DEFAULT_ALPHABET) -> dict[str, int]:
    """Character -> id of `build_char_tokenizer(alphabet)`, for fast encoding in training loops."""
    return {ch: i + len(SPECIALS) for i, ch in enumerate(alphabet)}
