"""The model organism: a tiny causal LM on the arithmetic task, built locally in minutes on a CPU,
on which RL visibly works and allocators visibly differ.

    path = ensure_organism("store")          # builds on first use, cached by recipe hash
    model, tokenizer = load_model(path)      # an ordinary Hugging Face model directory

Recipe (the defaults, `OrganismRecipe()`):

1. Tokenizer: one token per character of "0123456789+-*=" plus <pad> <bos> <eos> <unk>
   (`tokenizer.py`); saved as a standard tokenizer directory with a <bos> post-processor.
2. Model: `LlamaForCausalLM` (or Qwen2) from a config: hidden 128, 4 layers, 4 heads, FFN 512, tied
   embeddings, 64 positions (about 1.05M parameters).
3. Warm start (`warmstart.py`): next-token training on `expr=answer<eos>` with the loss on the
   answer, over the task's levels (eval problems excluded), AdamW 2e-3, warm-up then cosine decay.
4. **Corrupted answers**: a share `corrupt_frac` of the warm-start answers has one digit moved by
   +-1. Why: a warm start on clean answers is nearly greedy-sharp where it is right, so RL has
   little to add (measured: +2-4 points of pass@1 in 3 minutes of GRPO). Trained on 60% right and
   40% near-miss answers, the model puts most but not all of its mass on the right answer: the right
   answer is in its samples (pass@8 well above pass@1), sampling at T=1 often picks a near miss, and
   the reward is exactly what tells the two apart. GRPO sharpens the distribution towards the
   right answer and pass@1 climbs (measured: 0.32 -> 0.47-0.50 held-out in 240 uniform GRPO steps,
   `workbench bench learn --seeds 3`).
5. Levels run from trivially easy ("1+1") to beyond reach: "3*2" (multiplication) is in the task
   but left out of the warm start (`untaught_levels`), so the organism never gets it and RL cannot
   discover it from zero rewards. Pass rates spread over [0, 1], and an allocator that stops
   spending rollouts on hopeless prompts visibly beats uniform allocation.

6. **Workload profiles** (`task.profile`, issue #17) change the levels (the task's) and the warm
   start's treatment of each level (`PROFILE_WARM_START`): "skewed" learns three easy additions
   from clean answers, "3+2" from 40% near misses, and never sees its two multiplications, so pass
   rates at the warm start are U-shaped; "long" learns worked multi-step sums with 40% near-miss
   final values. The "default" profile is the recipe above, with the same hash as before profiles.

Determinism: examples from string-seeded `random.Random`, weights from `torch.manual_seed`,
`torch.use_deterministic_algorithms(True)` and a fixed thread count during the build: the same
recipe gives bit-identical weights (the report checks this by building twice) on one torch release
and CPU. Another torch release can train other weights from the same recipe, and so another warm
start: organism.json keeps the weights' SHA-256 (`weights_sha256`) and what built them (`built_with`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from workbench.checks import build_config, require, to_plain
from workbench.errors import ConfigError
from workbench.tasks.arithmetic import ArithmeticTask, ArithmeticTaskConfig

PROFILE_WARM_START: dict[str, dict[str, Any]] = {
    "default": {"untaught_levels": ("3*2",), "level_corrupt": {}},
    "skewed": {"untaught_levels": ("2*2", "3*2"), "level_corrupt": {"1+1": 0.0, "2+1": 0.0, "2+2": 0.0, "3+2": 0.4}},
    "long": {"untaught_levels": (), "level_corrupt": {}, "steps": 600},
    "tools": {"untaught_levels": (), "level_corrupt": {}, "tool_share": 0.25},
}
"""Each workload profile's warm start: untaught levels and corrupted shares by level spec (levels not
named get `corrupt_frac`), warm-start steps (700 where not named) and the share of examples that call
the calculator (`tool_share`, 0 where not named), used where the recipe leaves `untaught_levels` /
`level_corrupt` / `steps` / `tool_share` unset."""
RECIPE_VERSION = 1
"""Bumped when the build code changes what a recipe produces (it is part of the hash)."""
ARCHS = ("llama", "qwen2")
META_FILE = "organism.json"


@dataclass(frozen=True)
class OrganismRecipe:
    """Everything that determines the organism's weights; its hash names the cache directory."""

    task: ArithmeticTaskConfig = field(default_factory=ArithmeticTaskConfig)
    """The task whose levels the warm start covers (its eval split is excluded from training)."""
    alphabet: str = "0123456789+-*="
    """Characters of the tokenizer (after <pad> <bos> <eos> <unk>)."""
    arch: str = "llama"
    """"llama" (LlamaForCausalLM) or "qwen2" (Qwen2ForCausalLM)."""
    hidden_size: int = 128
    """Model width."""
    layers: int = 4
    """Transformer blocks."""
    heads: int = 4
    """Attention heads (as many key/value heads)."""
    ffn_size: int = 512
    """MLP inner width."""
    max_positions: int = 64
    """Longest sequence (prompt + answer) the model accepts."""
    steps: int | None = None
    """Warm-start optimiser steps; None: the profile's (700; "long": 600, whose batches are ~2.2x wider,
    so that its build stays within about 3 minutes on 2 cores like the others)."""
    batch_size: int = 128
    """Warm-start examples per step."""
    lr: float = 2e-3
    """Peak learning rate (AdamW)."""
    warmup_steps: int = 50
    """Linear warm-up steps before the cosine decay."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    corrupt_frac: float = 0.4
    """Share of warm-start answers with one digit moved by +-1 (the room left for RL)."""
    level_weights: tuple[float, ...] = ()
    """Relative frequency of each task level in the warm start; empty: uniform."""
    level_corrupt: tuple[float, ...] = ()
    """Share of corrupted answers per task level (one per level), overriding `corrupt_frac`; empty:
    the profile's (skewed: 0 on the easy additions, 0.4 on "3+2"), else `corrupt_frac` everywhere."""
    untaught_levels: tuple[str, ...] | None = None
    """Level specs left out of the warm start (when the task has them): beyond the organism's reach
    by construction, they give zero-reward groups that RL cannot learn from and allocators can skip.
    None: the profile's (default: "3*2"; skewed: "2*2" and "3*2"; long: none)."""
    tool_share: float | None = None
    """Share of warm-start examples written as an episode that calls the calculator (`<calc>expr</calc>`,
    its `<result>value</result>`, then the value; the loss skips the result) rather than answering at
    once. None: the profile's ("tools": 0.25, so that calling the tool is what RL must find; else 0)."""
    seed: int = 0
    """Seed of the weights and of the warm-start examples."""
    threads: int = 2
    """CPU threads during the build (fixed so the build is reproducible). On a busy machine use 1:
    with 2 threads and a load far above the core count, a training step of the small recipe took
    25x the CPU time of a single-threaded one (threads spin while waiting for each other)."""

    def __post_init__(self) -> None:
        warm = PROFILE_WARM_START[self.task.profile]
        if self.steps is None:
            object.__setattr__(self, "steps", int(warm.get("steps", 700)))
        if self.untaught_levels is None:
            object.__setattr__(self, "untaught_levels", warm["untaught_levels"])
        if self.tool_share is None:
            object.__setattr__(self, "tool_share", float(warm.get("tool_share", 0.0)))
        require(0 <= self.tool_share <= 1, "organism.tool_share", f"must be in [0, 1], got {self.tool_share}")
        require(self.tool_share == 0 or self.task.profile == "tools", "organism.tool_share",
                f"calls the calculator, which only the 'tools' profile's tokenizer has (profile is "
                f"{self.task.profile!r})")
        object.__setattr__(self, "untaught_levels", tuple(self.untaught_levels))
        if not self.level_corrupt and warm["level_corrupt"]:
            by_spec = warm["level_corrupt"]
            object.__setattr__(self, "level_corrupt",
                               tuple(float(by_spec.get(spec, self.corrupt_frac)) for spec in self.task.levels))
        require(
            not self.level_corrupt or len(self.level_corrupt) == len(self.task.levels),
            "organism.level_corrupt", f"needs one share per task level ({len(self.task.levels)})",
        )
        require(all(0 <= c < 1 for c in self.level_corrupt), "organism.level_corrupt", "each share must be in [0, 1)")
        require(self.arch in ARCHS, "organism.arch", f"{self.arch!r}; allowed: {', '.join(ARCHS)}")
        for name in ("hidden_size", "layers", "heads", "ffn_size", "max_positions", "steps", "batch_size", "threads"):
            require(getattr(self, name) >= 1, f"organism.{name}", f"must be >= 1, got {getattr(self, name)}")
        require(self.hidden_size % self.heads == 0, "organism.heads", "must divide hidden_size")
        require(0 <= self.corrupt_frac < 1, "organism.corrupt_frac", f"must be in [0, 1), got {self.corrupt_frac}")
        require(self.lr > 0, "organism.lr", "must be > 0")
        require(0 <= self.warmup_steps <= self.steps, "organism.warmup_steps", "must be in [0, steps]")
        require(
            not self.level_weights or len(self.level_weights) == len(self.task.levels),
            "organism.level_weights", f"needs one weight per task level ({len(self.task.levels)})",
        )
        require(all(w >= 0 for w in self.level_weights), "organism.level_weights", "must be >= 0")
        taught = [
            w for spec, w in zip(self.task.levels, self.level_weights or [1.0] * len(self.task.levels))
            if spec not in self.untaught_levels
        ]
        require(sum(taught) > 0, "organism.untaught_levels", "leaves no task level to warm-start on")
        needed = set("".join(self.task.levels).replace("+", "").replace("-", "").replace("*", ""))
        used = set(self.task.template.replace("{expr}", "")) | set("0123456789") | {
            op for spec in self.task.levels for op in "+-*" if op in spec
        }
        missing = sorted((used | needed) - set(self.alphabet))
        require(not missing, "organism.alphabet", f"lacks characters the task uses: {''.join(missing)!r}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "OrganismRecipe":
        """Build from a plain dict (TOML/JSON); "task" may be a nested table."""
        data = dict(data)
        if isinstance(data.get("task"), dict):
            data["task"] = ArithmeticTaskConfig.from_dict(data["task"])
        return build_config(cls, data, where="organism")

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    @property
    def extra_tokens(self) -> tuple[str, ...]:
        """Words the tokenizer holds as one token each beside the alphabet: the "tools" profile's
        episode markers (`TOOL_TOKENS`), else none."""
        from workbench.models.tokenizer import TOOL_TOKENS
        return TOOL_TOKENS if self.task.profile == "tools" else ()

    def corrupt_share(self, level: int) -> float:
        """Share of corrupted warm-start answers on task level `level` (1-based)."""
        return self.level_corrupt[level - 1] if self.level_corrupt else self.corrupt_frac

    def hash(self) -> str:
        """12 hex digits of the SHA-256 of the recipe (and RECIPE_VERSION) as canonical JSON. Fields
        added with the profiles are left out at their defaults, so older recipes keep their hash."""
        data = self.to_dict()
        if data["task"].get("profile") == "default":
            del data["task"]["profile"]
        if not data["level_corrupt"]:
            del data["level_corrupt"]
        if not data["tool_share"]:
            del data["tool_share"]
        blob = json.dumps({"version": RECIPE_VERSION, **data}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def small_recipe(**overrides: Any) -> OrganismRecipe:
    """A fast recipe for tests (seconds): fewer levels, a narrower model, fewer steps."""
    base = dict(
        task=ArithmeticTaskConfig(levels=("1+1", "2+1", "2+2"), train_size=300, eval_per_level=16),
        hidden_size=64, layers=2, heads=2, ffn_size=128, max_positions=32, steps=150, batch_size=64,
        warmup_steps=10, lr=3e-3, threads=1,
    )
    base.update(overrides)
    return OrganismRecipe(**base)


def organism_dir(store_dir: str | os.PathLike, recipe: OrganismRecipe | None = None) -> Path:
    """Where the organism of `recipe` lives in a store: `<store>/models/organism-<hash>/`."""
    recipe = recipe or OrganismRecipe()
    return Path(store_dir) / "models" / f"organism-{recipe.hash()}"


@contextlib.contextmanager
def _deterministic(threads: int) -> Iterator[None]:
    """Fixed threads and deterministic kernels for the duration of a build, restored after."""
    import torch

    old_threads, old_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det)


def _new_model(recipe: OrganismRecipe, vocab_size: int):
    """The untrained model of a recipe (seeded by the caller)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from workbench.models.tokenizer import BOS_ID, EOS_ID, PAD_ID

    config = AutoConfig.for_model(
        recipe.arch,
        vocab_size=vocab_size,
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.ffn_size,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.heads,
        max_position_embeddings=recipe.max_positions,
        tie_word_embeddings=True,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        use_cache=True,
    )
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


def build_organism(out_dir: str | os.PathLike, recipe: OrganismRecipe | None = None) -> dict[str, Any]:
    """Build the organism of `recipe` into `out_dir` (created; must not exist). Returns its metadata
    (also written to `organism.json`): recipe, hash, build_s, params, warm-start losses, the weights'
    SHA-256 and the build environment."""
    import torch

    from workbench.models.tokenizer import build_char_tokenizer
    from workbench.models.warmstart import make_examples, train

    recipe = recipe or OrganismRecipe()
    out = Path(out_dir)
    start, cpu_start = time.perf_counter(), time.process_time()
    with _deterministic(recipe.threads):
        tokenizer = build_char_tokenizer(recipe.alphabet, recipe.max_positions, recipe.extra_tokens)
        exclude = ArithmeticTask(recipe.task).eval_exprs
        ids, labels = make_examples(recipe, exclude)
        if ids.size(1) > recipe.max_positions:
            raise ConfigError(
                f"organism.max_positions: {recipe.max_positions} is shorter than the longest "
                f"warm-start example ({ids.size(1)} tokens)"
            )
        torch.manual_seed(recipe.seed)
        model = _new_model(recipe, len(tokenizer))
        losses = train(model, recipe, ids, labels)
    build_s, build_cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    out.mkdir(parents=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    meta = {
        "recipe": recipe.to_dict(),
        "hash": recipe.hash(),
        "build_s": round(build_s, 2),
        "build_cpu_s": round(build_cpu_s, 2),
        "params": sum(p.numel() for p in model.parameters()),
        "final_loss": round(sum(losses[-20:]) / min(20, len(losses)), 4),
        "first_loss": round(losses[0], 4),
    }
    meta.update(weights_sha256=weights_digest(out), built_with=build_environment())
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def weights_digest(path: str | os.PathLike) -> str:
    """SHA-256 of the saved weights file(s), to compare two builds bit for bit."""
    h = hashlib.sha256()
    for f in sorted(Path(path).glob("*.safetensors")):
        h.update(f.read_bytes())
    return h.hexdigest()


def build_environment() -> dict[str, str]:
    """What a build's weights depend on beyond its recipe: the recipe hash pins the recipe, not the
    numbers (another torch release or CPU can train other weights from the same recipe, and so another
    warm start). Kept in organism.json beside `weights_sha256`."""
    import platform

    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "machine": platform.machine(),
            "cpu": _cpu_model() or platform.processor() or "unknown"}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def ensure_organism(
    store_dir: str | os.PathLike, recipe: OrganismRecipe | None = None, force: bool = False
) -> Path:
    """The organism's directory under `store_dir`, building it first when missing (or `force`).

    The build goes to a temporary directory beside the target and is renamed into place, so a
    reader never sees half a model and two concurrent builders leave one complete copy.
    """
    recipe = recipe or OrganismRecipe()
    target = organism_dir(store_dir, recipe)
    if (target / META_FILE).is_file() and not force:
        return target
    return build_into(target, lambda out: build_organism(out, recipe), META_FILE)


def build_into(target: Path, build: Any, meta_file: str) -> Path:
    """Build a model directory into `target` through a temporary sibling renamed into place, so a reader
    never sees half a model and two builders racing leave one whole copy (`build(out)` writes the model,
    `meta_file` last). The organism's build and SmolLM2's conversion (`workbench.models.sources`) share it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp / "model")
        if target.exists():
            shutil.rmtree(target)
        try:
            os.replace(tmp / "model", target)
        except OSError:
            if not (target / meta_file).is_file():  # not a concurrent builder's finished copy
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def warm_start_pass_rates(path: str | os.PathLike, recipe: OrganismRecipe, samples: int = 16,
                          seed: int = 0, max_new_tokens: int | None = None) -> list[dict[str, Any]]:
    """Per held-out prompt of the recipe's task: level, spec and how many of `samples` answers at
    temperature 1 were right (the pass-rate histogram of a workload profile at its warm start)."""
    import torch

    from workbench.models.loading import load_model
    from workbench.models.sampling import sample_ids

    model, tok = load_model(path)
    task = ArithmeticTask(recipe.task)
    prompts = task.eval_prompts()
    ids = [tok(p.text)["input_ids"] for p in prompts]
    width = max_new_tokens or max(len(task.completion(p.metadata["expr"], p.answer)) for p in prompts) + 2
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        outs = sample_ids(model, [i for i in ids for _ in range(samples)], eos_id=tok.eos_token_id,
                          pad_id=tok.pad_token_id, max_new_tokens=width, temperature=1.0, generator=gen)
    rows = []
    for i, p in enumerate(prompts):
        texts = tok.batch_decode(outs[i * samples:(i + 1) * samples], skip_special_tokens=True)
        rows.append({"prompt_id": p.id, "level": p.level, "spec": p.metadata["spec"], "samples": samples,
                     "correct": sum(bool(task.verify(t, p).correct) for t in texts),
                     "mean_len": sum(len(o) for o in outs[i * samples:(i + 1) * samples]) / samples})
    return rows


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The organism.json of a built organism directory."""
    return json.loads((Path(path) / META_FILE).read_text())


__all__ = [
    "OrganismRecipe",
    "build_organism",
    "ensure_organism",
    "organism_dir",
    "read_meta",
    "weights_digest",
    "warm_start_pass_rates",
    "small_recipe",
]
