"""Token ids as text, for the notebooks: the tokenizer of the model a run's config names, found where
the engine put it under the store (the organism's or SmolLM2's converted directory, or the user's own
directory). Nothing is built or converted here."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from workbench.readers import RolloutReader

VISIBLE = str.maketrans({" ": "\u2423", "\n": "\u21b5", "\t": "\u2192"})
"""Whitespace as a person reads it in a chart's axis: a space token is `␣`, a newline `↵`."""


@lru_cache(maxsize=8)
def _tokenizer(path: str) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def model_dir(store: RolloutReader, run_id: str) -> Path | None:
    """The local directory of the model `run_id` was trained from, or None when it is not found here
    (no `model.path` in the run's config, an imported run, a store with no local folder)."""
    from workbench.models.sources import cached_dir

    model = (store.run(run_id).get("config") or {}).get("model")
    root = getattr(getattr(store, "location", None), "lock_dir", None)
    if not isinstance(model, dict) or not model.get("path") or root is None:
        return None
    recipe = None
    if model["path"] == "organism" and model.get("organism"):
        from workbench.models.organism import OrganismRecipe

        recipe = OrganismRecipe.from_dict(dict(model["organism"]))
    try:
        return cached_dir(str(model["path"]), root, recipe)
    except Exception:  # noqa: BLE001 - a source whose package is missing here: no tokenizer, ids stay ids
        return None


def token_text(store: RolloutReader, run_id: str) -> Callable[[int], str]:
    """A function from a token id to its text as a reader sees it (a subword token of SmolLM2's
    byte-level BPE `Ġthe` is ` the`, shown `␣the`; a byte token that is part of a character `\\ufffd`
    stays as the tokenizer decodes it), falling back to `#<id>` when the run's tokenizer is not here."""
    path = model_dir(store, run_id)
    file = path / "tokenizer.json" if path is not None else None
    if file is None or not file.is_file():
        return lambda i: f"#{int(i)}"
    tok = _tokenizer(str(file))
    return lambda i: tok.decode([int(i)], skip_special_tokens=False).translate(VISIBLE) or f"#{int(i)}"
