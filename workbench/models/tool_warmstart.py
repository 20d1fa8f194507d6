"""SmolLM2 taught to call the calculator: a short supervised warm start on generated conversations of the
arithmetic word-problem task, in the one tool format the engine and TRL's `GRPOTrainer(tools=[...])` share.

    path = ensure_smollm2_tools("store")          # built once (a few CPU minutes), cached by its recipe's hash
    # or in a run config: [model] path = "smollm2-tools"   (configs/smollm2-tools-warm.toml)

The format is Qwen 2.5's tool-calling chat template (`workbench.models.chat_templates.QWEN2_5`, TRL's own
`qwen2_5.jinja`; SmolLM2 has the same ChatML tokens). Each training conversation, rendered by that
template with the calculator's schema (`tool_specs(["calculator"])`) in the system turn:

    <|im_start|>system ... # Tools ... <tools>{calculator's schema}</tools> ...<|im_end|>
    <|im_start|>user\\nA shop packs 37 boxes with 48 pens in each box. How many pens ...?<|im_end|>
    <|im_start|>assistant\\n                                                     (prompt: not trained)
    <tool_call>\\n{"name": "calculator", "arguments": {"expression": "37*48"}}\\n</tool_call><|im_end|>  (trained)
    \\n<|im_start|>user\\n<tool_response>\\n1776\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n  (fed)
    1776<|im_end|>                                                                                  (trained)

Loss on the assistant tokens only. The segments are tokenised apart, as the engine builds an episode
(prompt ids + sampled call + fed result + sampled answer) and as TRL concatenates prompt, completion and
tool suffix ids. Deterministic given the recipe: problems from `random.Random` seeded with a string,
`torch.manual_seed`, a fixed number of threads. Questions of the task's held-out split are never trained on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.models.chat_templates import QWEN2_5

SOURCE = "smollm2-tools"
META_FILE = "warmstart.json"
BUILD_VERSION = 1
"""Bumped when the build code changes what it writes (part of the cache key)."""
IGNORE = -100
TEMPLATE = "A shop packs {a} boxes with {b} pens in each box. How many pens does the shop pack?"
"""The word problem the warm start is taught on (configs/smollm2-tools-warm.toml asks the same)."""


@dataclass(frozen=True)
class ToolWarmRecipe:
    """How the tool-calling SmolLM2 is built (each field is part of its cache key)."""

    task: dict[str, Any] = field(default_factory=lambda: {
        "kind": "arithmetic", "levels": ["2*1", "2*2", "3*2"], "eval_per_level": 8, "template": TEMPLATE,
        "verifier": "number", "profile": "tools"})
    """The arithmetic task whose problems are the conversations (its held-out split is left out)."""
    tool: str = "calculator"
    steps: int = 20
    """Optimizer steps."""
    batch_size: int = 8
    lr: float = 1e-4
    warmup_steps: int = 2
    seed: int = 0
    train_layers: int = 12
    """Decoder layers trained, counted from the top (the rest, the embeddings and the head stay frozen)."""
    threads: int = 2
    """torch threads during the build (a fixed number keeps it reproducible)."""

    def key(self, base_key: str) -> str:
        """12 hex digits naming this build of the base model `base_key` (the cache directory's suffix)."""
        blob = json.dumps({"recipe": dataclasses.asdict(self), "base": base_key, "version": BUILD_VERSION,
                           "template": hashlib.sha256(QWEN2_5.encode()).hexdigest()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def conversation(expr: str, answer: str, question: str, tool: str = "calculator") -> list[dict[str, Any]]:
    """The messages of one taught episode: the question, the call of `tool` on `expr`, its result, the answer."""
    call = {"type": "function", "function": {"name": tool, "arguments": {"expression": expr}}}
    return [{"role": "user", "content": question},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": tool, "content": answer},
            {"role": "assistant", "content": answer}]


def segments(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """`messages` (from `conversation`) rendered by the tokenizer's chat template, cut into (text, trained):
    prompt, call (through `<|im_end|>`), tool turn (through the next `<|im_start|>assistant\\n`), answer."""
    def render(msgs: list[dict[str, Any]], gen: bool) -> str:
        return tokenizer.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=gen)

    p0, p1 = render(messages[:1], True), render(messages[:2], False)
    p2, p3 = render(messages[:3], True), render(messages, False)
    eot = tokenizer.eos_token
    for shorter, longer in ((p0, p1), (p1, p2), (p2, p3)):
        if not longer.startswith(shorter):
            raise ValueError("the chat template is not prefix-preserving on a tool conversation")
    if not (p1.endswith(eot + "\n") and p3.endswith(eot + "\n")):
        raise ValueError(f"the chat template does not end a turn with {eot!r} and a newline")
    return [(p0, False), (p1[len(p0):-1], True), (p2[len(p1) - 1:], False), (p3[len(p2):-1], True)]


def encode(tokenizer: Any, parts: list[tuple[str, bool]]) -> tuple[list[int], list[bool]]:
    """Token ids of `segments`' parts, each tokenised apart, and whether each token is trained on."""
    ids: list[int] = []
    trained: list[bool] = []
    for text, train in parts:
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += piece
        trained += [train] * len(piece)
    return ids, trained


def make_examples(tokenizer: Any, recipe: ToolWarmRecipe) -> tuple[Any, Any]:
    """All the warm start's examples as right-padded `(input_ids [N, L], labels [N, L])`, N = steps x batch."""
    import torch

    from workbench.config import task_config
    from workbench.tasks.arithmetic import ArithmeticTask, fill_template, sample_problem
    from workbench.tools import tool_specs

    task = ArithmeticTask(task_config(dict(recipe.task)))
    held_out = task.eval_exprs
    tools = tool_specs([recipe.tool])
    rng = random.Random(f"smollm2-tools:{recipe.seed}:examples")
    seqs = []
    for _ in range(recipe.steps * recipe.batch_size):
        spec = rng.choice(task.cfg.levels)
        expr, answer = sample_problem(rng, spec)
        while expr in held_out:
            expr, answer = sample_problem(rng, spec)
        msgs = conversation(expr, answer, fill_template(task.cfg.template, expr), recipe.tool)
        seqs.append(encode(tokenizer, segments(tokenizer, msgs, tools)))
    width = max(len(s) for s, _ in seqs)
    ids = torch.full((len(seqs), width), int(tokenizer.pad_token_id), dtype=torch.long)
    labels = torch.full((len(seqs), width), IGNORE, dtype=torch.long)
    for i, (seq, trained) in enumerate(seqs):
        ids[i, : len(seq)] = torch.tensor(seq)
        target, keep = torch.tensor(seq[1:]), torch.tensor(trained[1:])  # labels[t] is seq[t + 1]
        labels[i, : len(seq) - 1] = torch.where(keep, target, torch.full_like(target, IGNORE))
    return ids, labels


def shared_prefix(ids: Any) -> int:
    """How many leading tokens every row of `ids` shares (the system turn with the tool list)."""
    same = (ids == ids[:1]).all(dim=0).long()
    return int(same.cumprod(0).sum())


def train(model: Any, recipe: ToolWarmRecipe, ids: Any, labels: Any) -> list[float]:
    """The warm start in place (AdamW on the top `recipe.train_layers` layers, linear warm-up then constant);
    the loss of every step. Each step runs the shared prefix (the system turn, ~230 of ~330 tokens) once
    without gradients and the rows' own tokens on its cache, and projects to the vocabulary only where a
    token is trained on: about 3x less work than the plain loop on this machine's CPU."""
    import torch

    layers = model.model.layers
    for p in model.parameters():
        p.requires_grad_(False)
    trained = [p for layer in layers[max(0, len(layers) - recipe.train_layers):] for p in layer.parameters()]
    trained += list(model.model.norm.parameters())
    for p in trained:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(trained, lr=recipe.lr, betas=(0.9, 0.95), weight_decay=0.0)
    cut = shared_prefix(ids)
    model.train()
    losses = []
    for step in range(recipe.steps):
        rows = slice(step * recipe.batch_size, (step + 1) * recipe.batch_size)
        x, y = ids[rows], labels[rows]
        width = int((y != IGNORE).nonzero()[:, 1].max()) + 1  # trim padding past the last label
        with torch.no_grad():
            cache = model.model(input_ids=x[:1, :cut], use_cache=True).past_key_values
        cache.batch_repeat_interleave(len(x))
        hidden = model.model(input_ids=x[:, cut:width], past_key_values=cache, use_cache=True).last_hidden_state
        target = y[:, cut:width]
        keep = target != IGNORE  # right padding: no trained token attends to it
        logits = model.lm_head(hidden[keep])
        loss = torch.nn.functional.cross_entropy(logits.float(), target[keep])
        for group in opt.param_groups:
            group["lr"] = recipe.lr * min(1.0, (step + 1) / max(1, recipe.warmup_steps))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    for p in model.parameters():
        p.requires_grad_(True)
    model.eval()
    return losses


def build_tool_model(base_dir: str | os.PathLike, out_dir: str | os.PathLike,
                     recipe: ToolWarmRecipe = ToolWarmRecipe()) -> dict[str, Any]:
    """Warm-start the model in `base_dir` (a Hugging Face directory with a ChatML tokenizer) into `out_dir`
    (created) with the Qwen 2.5 template as its chat template; returns the metadata (also `warmstart.json`)."""
    import torch

    from workbench.models.loading import load_model

    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    torch.manual_seed(recipe.seed)
    try:
        model, tokenizer = load_model(base_dir, dtype=torch.float32)
        tokenizer.chat_template = QWEN2_5
        ids, labels = make_examples(tokenizer, recipe)
        losses = train(model, recipe, ids, labels)
    finally:
        torch.set_num_threads(threads)
    out = Path(out_dir)
    out.mkdir(parents=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(out)
    meta = {"source": SOURCE, "base": str(base_dir), "recipe": dataclasses.asdict(recipe),
            "examples": int(ids.shape[0]), "tokens_per_example": int(ids.shape[1]),
            "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4),
            "losses": [round(x, 4) for x in losses], "build_s": round(time.perf_counter() - start, 1)}
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def smollm2_tools_dir(store_dir: str | os.PathLike, recipe: ToolWarmRecipe = ToolWarmRecipe()) -> Path:
    """Where the tool-calling SmolLM2 lives in a store: `<store>/models/smollm2-tools-<key>/`."""
    from workbench.models.sources import smollm2_key

    return Path(store_dir) / "models" / f"{SOURCE}-{recipe.key(smollm2_key())}"


def ensure_smollm2_tools(store_dir: str | os.PathLike, recipe: ToolWarmRecipe = ToolWarmRecipe()) -> Path:
    """The tool-calling SmolLM2 under `store_dir`, built from the converted SmolLM2 first when missing."""
    from workbench.models.organism import build_into
    from workbench.models.sources import ensure_smollm2

    target = smollm2_tools_dir(store_dir, recipe)
    if (target / META_FILE).is_file():
        return target
    base = ensure_smollm2(store_dir)
    return build_into(target, lambda out: build_tool_model(base, out, recipe), META_FILE)
