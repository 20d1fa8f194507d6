"""The organism's character tokenizer: round trip, <bos> post-processor, left padding, save/load."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.models.tokenizer import BOS_ID, DEFAULT_ALPHABET, EOS_ID, PAD_ID, build_char_tokenizer, char_ids

TOK = build_char_tokenizer()


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=DEFAULT_ALPHABET, min_size=0, max_size=40))
def test_round_trip(text):
    ids = TOK(text)["input_ids"]
    assert ids[0] == BOS_ID and len(ids) == len(text) + 1
    assert ids[1:] == [char_ids()[c] for c in text]
    assert TOK.decode(ids, skip_special_tokens=True) == text


def test_specials_and_unknown():
    assert (TOK.pad_token_id, TOK.bos_token_id, TOK.eos_token_id) == (PAD_ID, BOS_ID, EOS_ID)
    assert len(TOK) == 4 + len(DEFAULT_ALPHABET)
    assert TOK("1a")["input_ids"] == [BOS_ID, char_ids()["1"], TOK.unk_token_id]


def test_left_padding_and_save_load(tmp_path):
    from transformers import AutoTokenizer

    TOK.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    batch = loaded(["1+1=", "12+34="], padding=True)
    assert loaded.padding_side == "left"
    assert batch["input_ids"][0][:2] == [PAD_ID, PAD_ID]
    assert batch["attention_mask"][0] == [0, 0, 1, 1, 1, 1, 1]
    assert batch["input_ids"][1] == TOK("12+34=")["input_ids"]
