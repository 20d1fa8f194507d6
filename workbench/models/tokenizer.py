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
TOOL_TOKENS = ("<calc>", "</calc>", "<result>", "</result>")
"""The "tools" profile's episode markers, one token each (ids after the alphabet's): a calculator call
`<calc>37*48</calc>` (decoding pauses at `</calc>`) and its result `<result>1776</result>` (a tool turn,
never trained on)."""


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET, model_max_length: int = 64,
                         extra_tokens: tuple[str, ...] = ()):
    """A `PreTrainedTokenizerFast` with one id per character of `alphabet` (ids after the specials),
    then one per `extra_tokens` word (matched whole before the text is split into characters)."""
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in alphabet:
        if ch in vocab or ch.isspace():
            raise ValueError(f"alphabet: character {ch!r} repeats or is whitespace")
        vocab[ch] = len(vocab)
    for word in extra_tokens:
        if word in vocab or len(word) < 2:
            raise ValueError(f"extra_tokens: {word!r} repeats or is a single character")
        vocab[word] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    if extra_tokens:
        core.add_tokens(list(extra_tokens))
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


def char_ids(alphabet: str = DEFAULT_ALPHABET, extra_tokens: tuple[str, ...] = ()) -> dict[str, int]:
    """Character (and extra word) -> id of `build_char_tokenizer(alphabet, extra_tokens=...)`, for fast
    encoding in training loops."""
    ids = {ch: i + len(SPECIALS) for i, ch in enumerate(alphabet)}
    ids.update({w: i + len(SPECIALS) + len(alphabet) for i, w in enumerate(extra_tokens)})
    return ids
