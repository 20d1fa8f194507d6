"""`workbench.analysis.token_text`: token ids as text with the tokenizer of the model a run names (the
notebooks' forking-token chart), found under the store; `#<id>` when the run names none."""

from __future__ import annotations


def test_token_text_uses_the_runs_tokenizer_and_falls_back_to_ids(store_dir):
    from workbench.analysis import token_text
    from benchmarks.tiny import tiny_run
    from workbench.models.tokenizer import build_char_tokenizer
    from workbench.store import open_store

    cfg = tiny_run({"name": "t"}).to_dict()  # model.path = "organism", the small test organism's recipe
    ids = build_char_tokenizer()("12+7=", add_special_tokens=False)["input_ids"]
    with open_store(store_dir) as store:
        ours = store.create_run("ours", cfg, seed=0, status="finished")
        other = store.create_run("imported", {"source": "verl"}, seed=0, source="verl", status="imported")
        shown = [token_text(store, ours)(i) for i in ids]
        assert shown == ["1", "2", "+", "7", "="]  # the organism's characters, found under the store
        assert token_text(store, other)(ids[0]) == f"#{ids[0]}"
