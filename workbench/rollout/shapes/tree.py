"""Tree rollouts: a prompt's group grown as a tree that branches where the policy is unsure.

`latr` follows LATR (Xing et al. 2025, "Lookahead Tree-Based Rollouts for Enhanced Trajectory-Level
Exploration in Reinforcement Learning with Verifiable Rewards", arXiv 2510.24302; code starreeze/latr
read at 2adb0ed, `model/generation.py`, `model/sample_filter.py`, its math scripts for the settings).
How it departs from a group of independent samples:

1. Of a prompt's n rollouts, round(n * eta) grow as one tree and the rest are sampled plainly; eta is
   scheduled down over training (math: 1 -> 0.75 -> 0.5 -> 0.25 at steps 0 / 100 / 200 / 300; here
   by policy version, the steps trained in the synchronous loop).
2. At every tree step the candidates of a row are the top m = 2 tokens of the temperature-1 softmax;
   the rank-2 token opens a new branch when p_2 > tau_abs and p_1 - p_2 < tau_rel (math: 0.15 /
   0.25), while the tree has room (at most round(n * eta) rows). This is the direction of the code
   since its fix of Jan 2026 ("fix probability filter logic", 2adb0ed); before it tested
   p_1 - p_2 > tau_rel. Inside the tree each row continues greedily (rank 1), a new branch from its
   rank-2 token.
3. Lookahead pruning: when a branch is r tokens old (r in `prune_steps`, math 20 / 30 / 50), its last
   r tokens are compared with its parent's last r; it is removed (freeing room for new branches) when
   the suffix match exceeds `suffix_match` (0.2) or ROUGE-L exceeds `rouge_l` (0.5). Windows holding
   an EOS are not compared (as the code).
4. The tree phase ends when the tree is full and every branch is past its last pruning window (or
   every row ended); ordinary sampling from the current policy then finishes each unfinished row.
   Rows the tree did not fill are sampled plainly (the code's `fill_return_sequences`).
5. Advantages: LATR's plain GRPO, one row per sequence: each sequence carries its whole prefix, so
   a token shared by k branches enters the loss k times, once in each branch's row, with that row's
   advantage (`shared_credit` computes what a shared token receives in total).

`entropy` is the ARPO / TreeRL-style variant (Dong et al. 2025, arXiv 2507.19849; Hou et al. 2025,
arXiv 2506.11902): a row forks where the entropy of its temperature-1 distribution exceeds
`entropy_threshold`, and inside the tree every row samples from the sampling distribution instead
of going greedy (the fork's two rows draw independently). Pruning and eta are as above.

The behaviour log-probability stored for every token is the current policy's under the sampling
distribution (temperature / top-k / top-p); greedy and branch tokens are not samples of it, which is
why LATR's rollouts are off the sampling distribution by design. The tree phase keeps a key/value
cache row per live row (`CachedLogits`; a new branch copies its parent's), so each tree step runs one
new token per row, as decoding does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from workbench.rollout.base import SamplingParams, group_seed
from workbench.rollout.hf import inverse_cdf_sample, left_pad, sampling_logprobs
from workbench.rollout.shapes.common import Shaped, ShapeMetrics, empty_columns, eos_ids, pad_batch, row_of

CRITERIA = ("latr", "entropy")


# -- LATR's similarity measures (model/metrics.py) -------------------------------------------------

def _longest_prefix_in(pattern: list[int], text: list[int]) -> int:
    """Length of the longest prefix of `pattern` that occurs anywhere in `text`."""
    best = 0
    for start in range(len(text)):
        k = 0
        while k < len(pattern) and start + k < len(text) and text[start + k] == pattern[k]:
            k += 1
        best = max(best, k)
    return best


def suffix_match(a: Sequence[int], b: Sequence[int]) -> float:
    """LATR's suffix match of two windows of equal length: the longest suffix of one found anywhere in
    the other, over the window's length."""
    ra, rb = list(a)[::-1], list(b)[::-1]
    return max(_longest_prefix_in(ra, rb), _longest_prefix_in(rb, ra)) / max(len(a), 1)


def rouge_l(a: Sequence[int], b: Sequence[int]) -> float:
    """ROUGE-L F1 of two token sequences (longest common subsequence)."""
    a, b = list(a), list(b)
    if not a or not b:
        return 0.0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            cur[j + 1] = prev[j] + 1 if x == y else max(prev[j + 1], cur[j])
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    p, r = lcs / len(a), lcs / len(b)
    return 2 * p * r / (p + r)


def eta_at(steps: Sequence[int], values: Sequence[float], version: int) -> float:
    """The scheduled share of a group grown as a tree at training step `version` (piecewise constant)."""
    eta = values[0]
    for s, v in zip(steps, values):
        if version >= s:
            eta = v
    return float(eta)


# -- growing the trees -----------------------------------------------------------------------------

@dataclass
class Node:
    """One row of a tree: its tokens so far, and where it came from."""

    tokens: list[int]
    logp: list[float]
    entropy: list[float]
    parent: int = -1
    """Index (in its tree) of the row it branched from; -1: the root."""
    branch_at: int = -1
    """Response position of its first own token; -1: the root."""
    done: bool = False
    removed: bool = False


def grow_trees(next_logits: Callable[[list[list[int]]], torch.Tensor], prompts: Sequence[Sequence[int]],
               capacity: Sequence[int], cfg: Any, sampling: SamplingParams, eos: set[int],
               draws: Sequence[torch.Generator]) -> tuple[list[list[Node]], dict[str, float]]:
    """Grow one tree per prompt (at most `capacity[k]` rows) and return its surviving rows, in birth
    order with `parent` renumbered among them. `next_logits(seqs)` gives the [N, V] next-token logits
    of whole sequences (prompt + response); `draws[k]` drives the sampling inside tree k (entropy
    criterion only: LATR's rows are greedy)."""
    trees = [[Node([], [], [])] for _ in prompts]
    births, pruned = 0, 0
    last_window = max(cfg.prune_steps, default=0)
    for t in range(sampling.max_new_tokens):
        live = [(k, j) for k, tree in enumerate(trees) for j, nd in enumerate(tree) if not nd.done and not nd.removed]
        if not live:
            break
        if all(_full(trees[k], capacity[k]) and all(t - nd.branch_at > last_window for nd in trees[k]
                                                    if not nd.removed and nd.parent >= 0) for k in {k for k, _ in live}):
            break  # every tree full and past its pruning windows: ordinary sampling finishes the rows
        logits = next_logits([list(prompts[k]) + trees[k][j].tokens for k, j in live]).float()
        raw = torch.softmax(logits, dim=-1)
        logp = sampling_logprobs(logits, sampling)
        ent_raw = torch.special.entr(raw).sum(-1)
        ent = torch.special.entr(logp.exp()).sum(-1)
        top_p, top_i = raw.topk(2, dim=-1)
        for row, (k, j) in enumerate(live):
            tree, nd = trees[k], trees[k][j]
            if cfg.criterion == "latr":
                p1, p2 = float(top_p[row, 0]), float(top_p[row, 1])
                branch = p2 > cfg.tau_abs and p1 - p2 < cfg.tau_rel and bool(torch.isfinite(logp[row, top_i[row, 1]]))
                mine, theirs = int(top_i[row, 0]), int(top_i[row, 1])
            else:
                branch = float(ent_raw[row]) > cfg.entropy_threshold
                mine = int(inverse_cdf_sample(logp[row:row + 1], torch.rand(1, generator=draws[k], dtype=torch.float64)))
                theirs = int(inverse_cdf_sample(logp[row:row + 1], torch.rand(1, generator=draws[k], dtype=torch.float64)))
            if branch and not _full(tree, capacity[k]):
                tree.append(Node(nd.tokens + [theirs], nd.logp + [float(logp[row, theirs])], nd.entropy + [float(ent[row])],
                                 parent=j, branch_at=t, done=theirs in eos))
                births += 1
            nd.tokens.append(mine)
            nd.logp.append(float(logp[row, mine]))
            nd.entropy.append(float(ent[row]))
            nd.done = mine in eos
        for tree in trees:
            pruned += _prune(tree, t + 1, cfg, eos)
    out = [_compact(tree) for tree in trees]
    return out, {"rollout/shape/branches": births, "rollout/shape/pruned": pruned}


def _full(tree: list[Node], capacity: int) -> bool:
    return sum(not nd.removed for nd in tree) >= capacity


def _prune(tree: list[Node], length: int, cfg: Any, eos: set[int]) -> int:
    """Remove the branches that are exactly r tokens old (r in `prune_steps`) and still too similar
    to their parent (LATR's RolloutFilter); a removed row's own branches go with it."""
    gone = 0
    for j, nd in enumerate(tree):
        age = length - nd.branch_at
        if nd.removed or nd.parent < 0 or age not in cfg.prune_steps or len(nd.tokens) < length:
            continue
        par = tree[nd.parent]
        if len(par.tokens) < length:
            continue
        a, b = nd.tokens[length - age:length], par.tokens[length - age:length]
        if any(x in eos for x in a + b):
            continue
        if suffix_match(a, b) > cfg.suffix_match or rouge_l(a, b) > cfg.rouge_l:
            gone += _remove(tree, j)
    return gone


def _remove(tree: list[Node], j: int) -> int:
    tree[j].removed = True
    return 1 + sum(_remove(tree, c) for c, nd in enumerate(tree) if nd.parent == j and not nd.removed)


def _compact(tree: list[Node]) -> list[Node]:
    keep = [j for j, nd in enumerate(tree) if not nd.removed]
    where = {j: k for k, j in enumerate(keep)}
    out = []
    for j in keep:
        nd = tree[j]
        out.append(Node(nd.tokens, nd.logp, nd.entropy, where.get(nd.parent, -1), nd.branch_at, nd.done))
    return out


# -- how the shared prefix enters the loss ----------------------------------------------------------

def shared_credit(parent: Sequence[int], branch_at: Sequence[int], lengths: Sequence[int],
                  advantage: Sequence[float]) -> list[np.ndarray]:
    """Per row and response position, the total advantage that token receives in LATR's loss.

    Each sequence is its own row of the GRPO update, prefix included, so a token shared by several
    branches (positions before a row's branch point belong to its parent) is trained once per
    branch, each time with that branch's advantage: its total is the sum over the rows holding it.
    (TreeRL and TreePO would average, or give each segment its own advantage: not done here.)"""
    def owner(r: int, t: int) -> int:
        while parent[r] >= 0 and t < branch_at[r]:
            r = parent[r]
        return r

    total: dict[tuple[int, int], float] = {}
    for r, n in enumerate(lengths):
        for t in range(n):
            key = (owner(r, t), t)
            total[key] = total.get(key, 0.0) + float(advantage[r])
    return [np.asarray([total[(owner(r, t), t)] for t in range(n)]) for r, n in enumerate(lengths)]


# -- the engine's tree rollouts ---------------------------------------------------------------------

def last_logits(model: torch.nn.Module, pad_token_id: int) -> Callable[[list[list[int]]], torch.Tensor]:
    """`next_logits` over a Hugging Face causal LM without a cache: left-padded whole sequences, logits
    of the last (the reference `CachedLogits` is tested against)."""
    device = next(model.parameters()).device

    def f(seqs: list[list[int]]) -> torch.Tensor:
        ids, mask = left_pad(seqs, pad_token_id, device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                return model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1].cpu()
        finally:
            model.train(was_training)

    return f


class CachedLogits:
    """`next_logits` over a Hugging Face causal LM with a key/value cache, one cache row per sequence.

    A tree step asks for sequences that each extend one sequence of the previous call by one token (a
    row's next token, or a new branch's first token after its parent's prefix): each is found by its
    prefix, its cache row copied (a branch gets a copy of its parent's), and only the new token is run,
    as in the decoding loop (left padding, a mask column a step, position ids counting real tokens).
    Rows that ended or were pruned simply are not asked for again and leave the cache. A call whose
    sequences do not all extend the previous call's (the first) prefills them whole."""

    def __init__(self, model: torch.nn.Module, pad_token_id: int) -> None:
        self.model, self.pad_token_id = model, pad_token_id
        self.device = next(model.parameters()).device
        self.cache: Any = None
        self.rows: dict[tuple[int, ...], int] = {}
        self.mask = self.next_pos = None

    def __call__(self, seqs: list[list[int]]) -> torch.Tensor:
        from transformers import DynamicCache

        parents = [self.rows.get(tuple(x[:-1])) for x in seqs] if self.cache is not None else [None]
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                if any(p is None for p in parents):
                    ids, mask = left_pad(seqs, self.pad_token_id, self.device)
                    pos = (mask.cumsum(-1) - 1).clamp(min=0)
                    self.cache = DynamicCache(config=getattr(self.model, "config", None))
                    self.next_pos = pos[:, -1]
                else:
                    index = torch.as_tensor(parents, dtype=torch.long, device=self.device)
                    self.cache.batch_select_indices(index)
                    mask = torch.cat([self.mask[index], self.mask.new_ones((len(seqs), 1))], dim=1)
                    ids = torch.as_tensor([x[-1] for x in seqs], dtype=torch.long, device=self.device).unsqueeze(1)
                    pos = (self.next_pos[index] + 1).unsqueeze(1)
                    self.next_pos = pos[:, 0]
                logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=self.cache,
                                    use_cache=True, logits_to_keep=1).logits[:, -1].cpu()
        finally:
            self.model.train(was_training)
        self.mask = mask
        self.rows = {tuple(x): i for i, x in enumerate(seqs)}
        return logits


class TreeShape(ShapeMetrics):
    """The engine's tree rollouts (see the module docstring)."""

    name = "tree"

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def generate(self, model: torch.nn.Module, backend: Any, prompts: Sequence[Sequence[int]], keys: Sequence[int],
                 sampling: SamplingParams, seeds: Sequence[int], version: int, pad_token_id: int) -> Shaped:
        """A tree of round(n * eta) rows and n - that plain rows for each group (rows sharing a key)."""
        start = time.perf_counter()
        eta = eta_at(self.cfg.eta_steps, self.cfg.eta_values, version)
        groups: dict[int, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
        order = list(groups)
        cap = [round(len(groups[key]) * eta) for key in order]
        grown = [k for k, c in enumerate(cap) if c > 0]
        eos = eos_ids(backend)
        draws = [torch.Generator().manual_seed(group_seed(int(seeds[groups[order[k]][0]]) & (2**62 - 1), 0x7EE))
                 for k in grown]
        trees, metrics = grow_trees(CachedLogits(model, pad_token_id), [prompts[groups[order[k]][0]] for k in grown],
                                    [cap[k] for k in grown], self.cfg, sampling, eos, draws)
        n = len(prompts)
        final: list[Any] = [None] * n
        cols = empty_columns(n, self.name)
        node: dict[int, Node] = {}  # a group's first rows are its tree's, the rest are sampled plainly
        tree_of = dict(zip(grown, trees))
        for k, key in enumerate(order):
            for slot, nd in zip(groups[key], tree_of.get(k, [])):
                node[slot] = nd
                cols["parent_idx"][slot] = nd.parent
                cols["branch_at"][slot] = nd.branch_at
        prefix = [(i, node.get(i)) for key in order for i in groups[key]]
        tree_s = time.perf_counter() - start
        t_max = sampling.max_new_tokens
        todo = [(i, nd) for i, nd in prefix if nd is None or (not nd.done and len(nd.tokens) < t_max)]
        for i, nd in prefix:
            if nd is not None:
                final[i] = (nd.tokens, nd.logp, nd.entropy, nd.done)
        if todo:
            left = {i: t_max - (len(nd.tokens) if nd else 0) for i, nd in todo}
            cont = backend.generate([list(prompts[i]) + (nd.tokens if nd else []) for i, nd in todo],
                                    SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p,
                                                   top_k=sampling.top_k, max_new_tokens=max(left.values())),
                                    seeds=[seeds[i] for i, _ in todo])
            for r, (i, nd) in enumerate(todo):
                tok, lp, ent, _ = row_of(cont, r)
                ends = next((j for j, x in enumerate(tok[:left[i]]) if x in eos), None)
                m = left[i] if ends is None else ends + 1
                base = (nd.tokens, nd.logp, nd.entropy) if nd else ([], [], [])
                final[i] = (base[0] + tok[:m], base[1] + lp[:m], base[2] + ent[:m], ends is not None)
        out = pad_batch(final, pad_token_id, time.perf_counter() - start)
        metrics.update({"rollout/shape/tree_rows": sum(len(t) for t in trees), "rollout/shape/eta": eta,
                        "rollout/shape/tree_s": tree_s})
        self.note(metrics)
        return Shaped(out, cols, metrics)
