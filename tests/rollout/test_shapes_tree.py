"""Tree rollouts: LATR's branching rule (and its direction), lookahead pruning, eta, the shared
prefix's credit on a hand-computed tree, and trees grown on the organism."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from workbench.algorithms import get_advantage
from workbench.models import load_model
from workbench.models.organism import organism_dir, small_recipe
from workbench.rollout.base import SamplingParams
from workbench.rollout.hf import HFBackend
from workbench.rollout.shapes import TreeShape
from workbench.rollout.shapes.common import policy_rows
from workbench.rollout.shapes.tree import eta_at, grow_trees, rouge_l, shared_credit, suffix_match
from workbench.config.shapes import TreeConfig

EOS = 3


def table_policy(table):
    """next_logits over a hand-written table: response prefix (after the one-token prompt) -> probabilities
    of tokens 0, 1, 2 and EOS (3)."""
    def f(seqs):
        return torch.log(torch.tensor([table[tuple(s[1:])] for s in seqs], dtype=torch.float64) + 1e-12)
    return f


TABLE = {
    (): [0.5, 0.4, 0.05, 0.05],  # p2 = 0.4 > 0.15 and p1 - p2 = 0.1 < 0.25: branch, the child takes 1
    (0,): [0.9, 0.05, 0.0, 0.05],  # confident: no branch, greedy 0
    (1,): [0.25, 0.0, 0.45, 0.30],  # p2 = 0.30, p1 - p2 = 0.15: branch, the child takes EOS
    (0, 0): [0.05, 0.05, 0.05, 0.85],
    (1, 2): [0.0, 0.0, 0.1, 0.9],
}


def grow(table, capacity, **cfg):
    return grow_trees(table_policy(table), [[9]], [capacity], TreeConfig(**cfg), SamplingParams(max_new_tokens=4),
                      {EOS}, [torch.Generator().manual_seed(0)])


def test_latr_branches_where_the_top_two_are_close_and_goes_greedy_inside_the_tree():
    (tree,), m = grow(TABLE, 3)
    assert [(nd.tokens, nd.parent, nd.branch_at) for nd in tree] == [
        ([0, 0, EOS], -1, -1), ([1, 2, EOS], 0, 0), ([1, EOS], 1, 1)]
    assert m["rollout/shape/branches"] == 2
    assert all(nd.done for nd in tree)
    assert tree[2].logp[-1] == pytest.approx(math.log(0.30))  # the policy's log-prob of the branch token
    (small,), _ = grow(TABLE, 2)  # no room for the second branch
    assert [(nd.tokens, nd.parent) for nd in small] == [([0, 0, EOS], -1), ([1, 2, EOS], 0)]


def test_latr_does_not_branch_when_the_top_two_are_far_apart():
    """p1 - p2 = 0.4 > tau_rel: no branch (the code's direction since Jan 2026; before, it branched)."""
    far = dict(TABLE)
    far[()] = [0.6, 0.2, 0.1, 0.1]
    (tree,), m = grow(far, 4)
    assert m["rollout/shape/branches"] == 0 and [nd.tokens for nd in tree] == [[0, 0, EOS]]
    (tree,), _ = grow(far, 4, tau_rel=0.5)  # a looser tau_rel lets it branch
    assert len(tree) > 1


def test_a_branch_that_stays_like_its_parent_is_pruned_after_its_lookahead():
    same = {(): [0.5, 0.4, 0.05, 0.05], (0,): [0, 0, 1.0, 0], (1,): [0, 0, 1.0, 0],
            (0, 2): [0, 0, 0.95, 0.05], (1, 2): [0, 0, 0.95, 0.05],
            (0, 2, 2): [0, 0, 0.1, 0.9]}
    # at length 2 the child's window [1, 2] against the parent's [0, 2]: suffix match 0.5 > 0.2
    (tree,), m = grow(same, 2, prune_steps=(2,))
    assert m["rollout/shape/pruned"] == 1 and [nd.tokens for nd in tree] == [[0, 2, 2, EOS]]
    (kept,), m = grow(same, 2, prune_steps=(2,), suffix_match=0.6)  # 0.5 and ROUGE-L 0.5 are not above
    assert m["rollout/shape/pruned"] == 0 and len(kept) == 2


def test_similarity_measures_by_hand():
    assert suffix_match([1, 2, 3, 4], [9, 3, 4, 8]) == 0.5  # "3 4" ends a and occurs in b
    assert suffix_match([1, 2], [3, 4]) == 0.0
    assert rouge_l([1, 2, 3, 4], [1, 3, 4, 5]) == pytest.approx(0.75)  # LCS 1 3 4
    assert rouge_l([1], [2]) == 0.0


def test_eta_schedule_is_latrs_math_schedule():
    cfg = TreeConfig()
    assert [eta_at(cfg.eta_steps, cfg.eta_values, v) for v in (0, 99, 100, 250, 1000)] == [1.0, 1.0, 0.75, 0.5, 0.25]


def test_the_shared_prefix_carries_the_sum_of_its_branches_advantages():
    """R (root, reward 1), A from R at position 1 (reward 0), B from A at 2 (reward 1), C plain (0).
    GRPO: mean 0.5, unbiased std sqrt(1/3), so advantages are +-sqrt(3)/2. Position 0 of R is in R, A
    and B: credit a_R + a_A + a_B = +sqrt(3)/2; position 1 of A is in A and B: 0; and so on."""
    adv, _ = get_advantage("grpo")(torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.zeros(4, dtype=torch.long))
    h = math.sqrt(3) / 2
    assert adv.tolist() == pytest.approx([h, -h, h, -h], abs=1e-5)
    credit = shared_credit(parent=[-1, 0, 1, -1], branch_at=[-1, 1, 2, -1], lengths=[3, 3, 3, 2], advantage=adv)
    want = [[h, h, h], [h, 0, -h], [h, 0, h], [-h, -h]]
    for got, w in zip(credit, want):
        assert got.tolist() == pytest.approx(w, abs=1e-5)


@pytest.fixture(scope="module")
def organism(organism_models):
    model, tok = load_model(str(organism_dir(organism_models.parent, small_recipe())))
    return model, tok


@pytest.mark.parametrize("criterion", ["latr", "entropy"])
def test_trees_on_the_organism_share_their_prefixes_and_fill_the_group(organism, criterion):
    model, tok = organism
    prompts = [[tok.bos_token_id] + tok.encode(t, add_special_tokens=False) for t in ("7+8=", "12+9=")]
    cfg = TreeConfig(criterion=criterion, tau_abs=0.05, tau_rel=0.9, entropy_threshold=0.0,
                     eta_steps=(0, 10), eta_values=(1.0, 0.5))
    sampling = SamplingParams(max_new_tokens=4)
    rows = [prompts[0]] * 8 + [prompts[1]] * 8
    out = TreeShape(cfg).generate(model, HFBackend(model, tok), rows, [0] * 8 + [1] * 8, sampling,
                                  [5] * 8 + [6] * 8, 10, tok.pad_token_id)
    b, cols = out.batch, out.columns
    assert out.metrics["rollout/shape/eta"] == 0.5 and out.metrics["rollout/shape/tree_rows"] <= 8
    assert out.metrics["rollout/shape/branches"] >= 2
    for g in (0, 8):
        parents, at = cols["parent_idx"][g:g + 8], cols["branch_at"][g:g + 8]
        assert (parents[4:] == -1).all() and (at[4:] == -1).all()  # the plainly sampled half
        for r in range(8):
            if parents[r] >= 0:
                k, p = int(at[r]), g + int(parents[r])
                assert b.tokens[g + r, :k].tolist() == b.tokens[p, :k].tolist()  # the shared prefix
                if criterion == "latr":
                    assert b.tokens[g + r, k] != b.tokens[p, k]  # the rank-2 token, not the parent's
    assert int(b.lengths.max()) <= 4
    resp = [b.tokens[i, :int(b.lengths[i])].tolist() for i in range(16)]
    want = policy_rows(model, rows, resp, sampling, tok.pad_token_id)
    for i in range(16):  # behaviour log-probs: the current policy's, tree tokens and sampled ones alike
        n = int(b.lengths[i])
        assert torch.allclose(b.logprobs[i, :n], want[i][torch.arange(n), b.tokens[i, :n]], atol=1e-4)


def test_the_tree_phases_cache_gives_the_logits_of_whole_sequences(organism):
    """`CachedLogits` (a cache row per live row, a branch copying its parent's) against the whole
    sequences run without a cache, over tree-like calls: rows extended by a token, a row dropped, a
    branch born from a row's prefix, prompts of different lengths (left padding)."""
    from workbench.rollout.shapes.tree import CachedLogits, last_logits

    model, tok = organism
    a = [tok.bos_token_id] + tok.encode("7+8=", add_special_tokens=False)
    b = [tok.bos_token_id] + tok.encode("12+30=", add_special_tokens=False)
    calls = [[a, b], [a + [5], b + [6]], [a + [5, 7], a + [5, 8], b + [6, 9]], [a + [5, 8, 4], b + [6, 9, 3]],
             [a + [5, 8, 4, 2], a + [5, 8, 4, 11], b + [6, 9, 3, 12], b + [6, 9, 3, 13]]]
    cached, plain = CachedLogits(model, tok.pad_token_id), last_logits(model, tok.pad_token_id)
    for seqs in calls:
        assert torch.allclose(cached(seqs), plain(seqs), atol=1e-4), seqs
    assert cached.cache.get_seq_length() == len(b) + 4  # one column a step, never a second prefill
