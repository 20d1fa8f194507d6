"""The run's tokenizer for the pages (a cached part of the data layer, `app/data.py`): decoding a rollout's
token ids as its model does, and the prompts as its chat template showed them to the model. Found through
the engine's own answer to "which model directory does this run use" (`run_model_dir`); nothing is built or
converted here."""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st

from app.data import run, store_location


@st.cache_resource(show_spinner=False)
def _tokenizer(path: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def _model_dir(run_id: str) -> tuple[Path | None, dict]:
    """The local directory of the model the run's config names (`run_model_dir`, the engine's own answer,
    never building or converting anything here) and the config's `model` table."""
    cfg = run(run_id).get("config")
    cfg = json.loads(cfg) if isinstance(cfg, str) else (cfg or {})
    model = cfg.get("model") if isinstance(cfg, dict) else None
    if not isinstance(model, dict) or not model.get("path"):
        return None, {}
    from workbench.models.sources import run_model_dir

    try:
        return run_model_dir(cfg, store_location(), build=False), model
    except Exception:  # noqa: BLE001 - a source that can't be found here (its package missing): no tokenizer
        return None, model


def token_decoder(run_id: str):
    """A function decoding a list of token ids with the run's tokenizer (`decode(ids, special)`, the
    special tokens kept or dropped; the `tokenizer.json` of the model the run's config names), or None
    when there is none to be found."""
    path, _ = _model_dir(run_id)
    cand = path / "tokenizer.json" if path else None
    if cand is None or not cand.is_file():
        return None
    tok = _tokenizer(str(cand))
    return lambda ids, special=True: tok.decode([int(i) for i in ids], skip_special_tokens=not special)


@st.cache_resource(show_spinner=False)
def _chat_tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def uses_chat_template(run_id: str) -> bool:
    """Whether the run wrapped its prompts in its model's chat template (`model.chat_template`)."""
    return bool(_model_dir(run_id)[1].get("chat_template"))


@st.cache_data(ttl=600, show_spinner=False)
def chat_prompts(run_id: str, texts: tuple[str, ...]) -> dict[str, str]:
    """Each prompt text as the model saw it, through its chat template as one user turn (the system
    turn the template adds, the role markers); {} when the run used no template or the tokenizer is
    not found."""
    path, model = _model_dir(run_id)
    if path is None or not model.get("chat_template") or not (path / "tokenizer_config.json").is_file():
        return {}
    tok = _chat_tokenizer(str(path))
    return {t: tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
            for t in texts}
