"""Loading a local Hugging Face causal LM (model + tokenizer) by path, with errors a user can act on.

`load_model(path)` refuses, naming the path: a directory that does not exist or holds no model
config, a config that is not a causal LM, missing weights or tokenizer, a tokenizer whose ids do not
fit the model's embedding table. It sets left padding (generation) and a pad token when the
tokenizer has none (its EOS token). `check_prompt_fits` refuses a prompt that, with the tokens to be
generated, is longer than the model's positions.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from workbench.errors import DataError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def _check_dir(path: Path) -> None:
    if not path.exists():
        raise DataError(f"model path {path} does not exist")
    if not path.is_dir():
        raise DataError(f"model path {path} is not a directory (expected a Hugging Face model directory)")
    if not (path / "config.json").is_file():
        raise DataError(f"model path {path} is not a Hugging Face model directory: no config.json")
    if not any((path / f).is_file() for f in WEIGHT_FILES):
        raise DataError(f"model path {path} has no weights (looked for {', '.join(WEIGHT_FILES)})")


def _load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds
        raise DataError(f"model path {path}: cannot load its tokenizer: {exc}") from exc
    if isinstance(tokenizer, bool) or not callable(tokenizer):
        raise DataError(f"model path {path}: no usable tokenizer found")
    return tokenizer


def embedding_rows(model: Any) -> int:
    """Rows of the model's input embedding table (the ids it accepts)."""
    return int(model.get_input_embeddings().weight.shape[0])


def check_tokenizer_matches(tokenizer: Any, model: Any, path: str | Path = "") -> None:
    """DataError when the tokenizer can produce ids the model's embedding table does not have."""
    rows = embedding_rows(model)
    where = f"model path {path}: " if path else ""
    if len(tokenizer) > rows:
        raise DataError(
            f"{where}tokenizer does not match the model: {len(tokenizer)} tokens but the embedding "
            f"table has {rows} rows"
        )
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        tid = getattr(tokenizer, name, None)
        if tid is not None and not 0 <= tid < rows:
            raise DataError(f"{where}tokenizer {name}={tid} is outside the model's {rows} embeddings")


def max_positions(model: Any, tokenizer: Any = None) -> int | None:
    """The longest sequence the model accepts (config.max_position_embeddings), None when unknown."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if isinstance(limit, int) and 0 < limit < 10**9 else None


def check_prompt_fits(tokenizer: Any, model: Any, prompt_ids: Sequence[int], max_new_tokens: int) -> None:
    """DataError when `prompt_ids` plus `max_new_tokens` exceed the model's positions.

    The engine calls this before generating, so an over-long prompt fails with its length and the
    limit instead of an index error deep inside attention.
    """
    limit = max_positions(model, tokenizer)
    need = len(prompt_ids) + max_new_tokens
    if limit is not None and need > limit:
        preview = tokenizer.decode(list(prompt_ids)[:40], skip_special_tokens=True)
        raise DataError(
            f"prompt of {len(prompt_ids)} tokens + max_new_tokens={max_new_tokens} = {need} exceeds the "
            f"model's {limit} positions (prompt starts {preview!r}); shorten the prompt or lower "
            "sampling.max_new_tokens"
        )


def load_model(path: str | os.PathLike, device: str = "cpu", dtype: Any = None) -> tuple[Any, Any]:
    """(model, tokenizer) of a local Hugging Face causal LM directory, in eval mode on `device`.

    `dtype` is a torch dtype or None (the checkpoint's own). The tokenizer pads on the left and has
    a pad token (its EOS token when it had none).
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(path)
    _check_dir(path)
    try:
        config = AutoConfig.from_pretrained(path)
    except Exception as exc:  # noqa: BLE001
        raise DataError(f"model path {path}: config.json is not a model config: {exc}") from exc
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or "auto")
    except ValueError as exc:
        raise DataError(f"model path {path}: {type(config).__name__} is not a causal LM: {exc}") from exc
    except Exception as exc:  # noqa: BLE001
        raise DataError(f"model path {path}: cannot load the model: {exc}") from exc
    tokenizer = _load_tokenizer(path)
    check_tokenizer_matches(tokenizer, model, path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise DataError(f"model path {path}: tokenizer has neither a pad nor an EOS token")
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)
    model.eval()
    return model, tokenizer
