"""The organism's supervised warm start: next-token training on `expr=answer<eos>`, loss on the
answer only, with a share of the answers deliberately wrong by one digit (see `organism.py` for why).

Everything here is deterministic given the recipe: the examples come from `random.Random` seeded
with a string, the weights from `torch.manual_seed`, and the build runs with deterministic
algorithms on a fixed number of threads.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

import torch

from workbench.models.tokenizer import BOS_ID, EOS_ID, PAD_ID, char_ids
from workbench.tasks.arithmetic import sample_problem

if TYPE_CHECKING:
    from workbench.models.organism import OrganismRecipe

IGNORE = -100


def corrupt_answer(answer: str, rng: random.Random) -> str:
    """`answer` with one digit moved by +-1 (never creating a leading zero): near, plausibly wrong."""
    positions = [i for i, c in enumerate(answer) if c.isdigit()]
    i = rng.choice(positions)
    d = int(answer[i])
    step = rng.choice((-1, 1))
    if d + step < 0 or d + step > 9 or (i == positions[0] and d + step == 0 and len(positions) > 1):
        step = -step
    return answer[:i] + str(d + step) + answer[i + 1 :]


def make_examples(recipe: "OrganismRecipe", exclude: frozenset[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """All warm-start examples as right-padded `(input_ids [N, L], labels [N, L])`.

    N = steps x batch_size. Levels are drawn with `recipe.level_weights` (uniform when empty),
    leaving out `recipe.untaught_levels`; problems in `exclude` (the task's eval split) are redrawn,
    so eval stays held out.
    """
    from workbench.tasks.arithmetic import ArithmeticTask

    task = ArithmeticTask(recipe.task)
    rng = random.Random(f"organism:{recipe.seed}:examples")
    weights = list(recipe.level_weights) or [1.0] * len(recipe.task.levels)
    taught = [(i, spec, w) for i, (spec, w) in enumerate(zip(recipe.task.levels, weights), start=1)
              if spec not in recipe.untaught_levels]
    levels, weights = [(i, spec) for i, spec, _ in taught], [w for _, _, w in taught]
    table = char_ids(recipe.alphabet, recipe.extra_tokens)
    n = recipe.steps * recipe.batch_size
    seqs: list[tuple[list[int], list[bool]]] = []
    for _ in range(n):
        level, spec = rng.choices(levels, weights)[0]
        expr, answer = sample_problem(rng, spec)
        while expr in exclude:
            expr, answer = sample_problem(rng, spec)
        prompt = [BOS_ID] + [table[c] for c in recipe.task.template.format(expr=expr)]
        if recipe.tool_share and rng.random() < recipe.tool_share:
            seqs.append(_tool_episode(prompt, expr, answer, table))
            continue
        if rng.random() < recipe.corrupt_share(level):
            answer = corrupt_answer(answer, rng)
        answer = task.completion(expr, answer)  # the value, or worked steps ending in it ("long")
        seq = prompt + [table[c] for c in answer] + [EOS_ID]
        seqs.append((seq, [False] * len(prompt) + [True] * (len(seq) - len(prompt))))
    width = max(len(s) for s, _ in seqs)
    ids = torch.full((n, width), PAD_ID, dtype=torch.long)
    labels = torch.full((n, width), IGNORE, dtype=torch.long)
    for i, (seq, trained) in enumerate(seqs):
        ids[i, : len(seq)] = torch.tensor(seq)
        # labels[t] is the token predicted at position t (i.e. seq[t + 1]): the trained tokens only
        target = torch.tensor(seq[1:])
        keep = torch.tensor(trained[1:])
        labels[i, : len(seq) - 1] = torch.where(keep, target, torch.full_like(target, IGNORE))
    return ids, labels


def _tool_episode(prompt: list[int], expr: str, answer: str, table: dict[str, int]) -> tuple[list[int], list[bool]]:
    """A warm-start episode of the "tools" profile: the call `<calc>expr</calc>`, its result
    `<result>value</result>` (a tool turn: not trained on), then the value and EOS."""
    call = [table["<calc>"]] + [table[c] for c in expr] + [table["</calc>"]]
    result = [table["<result>"]] + [table[c] for c in answer] + [table["</result>"]]
    final = [table[c] for c in answer] + [EOS_ID]
    seq = prompt + call + result + final
    return seq, [False] * len(prompt) + [True] * len(call) + [False] * len(result) + [True] * len(final)


def lr_at(step: int, recipe: "OrganismRecipe") -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < recipe.warmup_steps:
        return recipe.lr * (step + 1) / recipe.warmup_steps
    progress = (step - recipe.warmup_steps) / max(1, recipe.steps - recipe.warmup_steps)
    return recipe.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def train(model: torch.nn.Module, recipe: "OrganismRecipe", ids: torch.Tensor, labels: torch.Tensor) -> list[float]:
    """Run the warm start in place; returns the loss of every step."""
    opt = torch.optim.AdamW(
        model.parameters(), lr=recipe.lr, betas=(0.9, 0.95), weight_decay=recipe.weight_decay
    )
    model.train()
    losses = []
    for step in range(recipe.steps):
        rows = slice(step * recipe.batch_size, (step + 1) * recipe.batch_size)
        x, y = ids[rows], labels[rows]
        width = int((y != IGNORE).nonzero()[:, 1].max()) + 1  # trim padding past the last label
        logits = model(input_ids=x[:, :width]).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(), y[:, :width].reshape(-1), ignore_index=IGNORE
        )
        for group in opt.param_groups:
            group["lr"] = lr_at(step, recipe)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses
