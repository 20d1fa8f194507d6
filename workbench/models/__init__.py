"""Models: loading Hugging Face causal LMs from a local path, and the model organism (a tiny
transformer with a character tokenizer and a supervised warm start, cached under the store).

    from workbench.models import load_model, check_prompt_fits
    from workbench.models.organism import ensure_organism, OrganismRecipe

torch and transformers are imported inside the functions, so importing this package is light.
"""

from __future__ import annotations

from workbench.models.loading import check_prompt_fits, check_tokenizer_matches, load_model, max_positions

__all__ = ["check_prompt_fits", "check_tokenizer_matches", "load_model", "max_positions"]
