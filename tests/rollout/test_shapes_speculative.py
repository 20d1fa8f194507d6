"""Speculative rollouts are exact in `exact` mode and not in SPEC-RL's `lenient` mode, on the organism.

The drafts come from older weights: the organism with its final norm scaled by 0.6 (a flatter policy),
so p_old differs from the current policy p_new everywhere. Fixed seeds make every test deterministic:
a statistical test here passes or fails the same way on every run."""

from __future__ import annotations

import collections
import copy

import numpy as np
import pytest
import torch

from workbench.models import load_model
from workbench.models.organism import organism_dir, small_recipe
from workbench.rollout.base import SamplingParams
from workbench.rollout.hf import HFBackend, sampling_logprobs
from workbench.rollout.shapes import SpeculativeShape
from workbench.rollout.shapes.common import chi2_homogeneity, chi2_power, policy_rows
from workbench.rollout.shapes.speculative import acceptance, nbytes, verify, weights_of
from workbench.config.shapes import SpeculativeConfig

ALPHA = 1e-3
N = 1200  # responses per sample: the power below is computed for this size
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=3)


@pytest.fixture(scope="module")
def policies(organism_models):
    new, tok = load_model(str(organism_dir(organism_models.parent, small_recipe())))
    old = copy.deepcopy(new)
    with torch.no_grad():
        old.model.norm.weight.mul_(0.6)  # "older weights": another, flatter policy
    return new, old, tok


def prompt(tok, text="7+8="):
    return [tok.bos_token_id] + tok.encode(text, add_special_tokens=False)


def next_probs(model, ids, sampling=SAMPLING):
    with torch.inference_mode():
        return sampling_logprobs(model(torch.tensor([ids])).logits[:, -1], sampling)[0].exp().double()


def responses(batch):
    return collections.Counter(tuple(batch.tokens[i, :int(batch.lengths[i])].tolist()) for i in range(batch.tokens.shape[0]))


def firsts(counter):
    """The first tokens' counts of a Counter of responses."""
    out = collections.Counter()
    for r, c in counter.items():
        out[r[:1]] += c
    return out


def speculative_sample(policies, mode, seed, n=N):
    """n responses of the current policy, each from a draft the older weights sampled."""
    new, old, tok = policies
    p = prompt(tok)
    seeds = [seed + i // 50 for i in range(n)]
    shape = SpeculativeShape(SpeculativeConfig(mode=mode))
    shape.generate(old, HFBackend(old, tok), [p] * n, [0] * n, SAMPLING, seeds, 0, tok.pad_token_id)  # the drafts
    out = shape.generate(new, HFBackend(new, tok), [p] * n, [0] * n, SAMPLING, [s + 7 for s in seeds], 1,
                         tok.pad_token_id)
    return out


def test_the_test_has_power_against_the_lenient_shift(policies):
    """Against lenient mode's first-token distribution, q(x) min(1, l p(x)/q(x)) + R p(x) with R the
    rejected mass (computed exactly from the two policies' rows), the chi-square test of N against N
    at level 1e-3 has power >= 0.9 (noncentral chi-square)."""
    new, old, tok = policies
    p, q = next_probs(new, prompt(tok)), next_probs(old, prompt(tok))
    kept = torch.minimum(q, np.exp(0.5) * p)
    lenient = kept + (1 - kept.sum()) * p
    df = int((p * N >= 5).sum())
    power = chi2_power(p.numpy(), lenient.numpy(), N, df=df, alpha=ALPHA)
    assert power >= 0.9, power
    assert float((p - lenient).abs().sum()) > 0.1  # a real shift, not rounding


def test_exact_mode_is_distributed_as_fresh_sampling_and_lenient_is_not(policies):
    new, _, tok = policies
    fresh = HFBackend(new, tok).generate([prompt(tok)] * N, SAMPLING, seeds=[9000 + i // 50 for i in range(N)])
    indep = responses(fresh)
    exact = speculative_sample(policies, "exact", 1000)
    lenient = speculative_sample(policies, "lenient", 1000)
    assert exact.metrics["rollout/shape/reused_tokens"] > N  # drafts were reused, and rejected somewhere
    assert 0 < exact.metrics["rollout/shape/rejected"] < N
    for a, b in ((responses(exact.batch), indep), (firsts(responses(exact.batch)), firsts(indep))):
        stat, df, pval = chi2_homogeneity(a, b)
        assert pval > ALPHA, (stat, df, pval)
    stat, df, pval = chi2_homogeneity(firsts(responses(lenient.batch)), firsts(indep))
    assert pval < ALPHA, (stat, df, pval)
    assert lenient.metrics["rollout/shape/reused_tokens"] > exact.metrics["rollout/shape/reused_tokens"]


def test_behaviour_logprobs_are_the_current_policys(policies):
    new, _, tok = policies
    out = speculative_sample(policies, "exact", 2000, n=64).batch
    rows = policy_rows(new, [prompt(tok)] * 64, [out.tokens[i, :int(out.lengths[i])].tolist() for i in range(64)],
                       SAMPLING, tok.pad_token_id)
    for i in range(64):
        n = int(out.lengths[i])
        want = rows[i][torch.arange(n), out.tokens[i, :n]]
        assert torch.allclose(out.logprobs[i, :n], want, atol=1e-4), i


def test_a_prefix_from_older_weights_is_accepted_token_by_token_with_the_right_probability(policies):
    """One draft of the older weights, verified under M fresh uniform vectors: the first token is kept
    with frequency min(1, p/q) and the second, given the first, with its own min(1, p/q); exact's
    output at the first position is distributed as p (acceptance plus residual)."""
    new, old, tok = policies
    p0 = prompt(tok)
    g = torch.Generator().manual_seed(5)
    while True:  # a draft whose two tokens both have p_new < p_old (so acceptance is a real coin)
        draft = HFBackend(old, tok).generate([p0], SAMPLING, generator=g)
        toks = draft.tokens[0, :int(draft.lengths[0])].tolist()
        if len(toks) < 2:
            continue
        rn = policy_rows(new, [p0], [toks], SAMPLING, tok.pad_token_id)[0]
        ro = policy_rows(old, [p0], [toks], SAMPLING, tok.pad_token_id)[0]
        want = acceptance(rn[torch.arange(2), toks[:2]], ro[torch.arange(2), toks[:2]], 1.0)
        if bool((want < 0.9).all()):
            break
    m = 8000
    old_lp = ro[torch.arange(len(toks)), toks].tolist()
    u = torch.rand((m, len(toks)), generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    v = verify([rn] * m, [toks] * m, [old_lp] * m, list(u), mode="lenient", lenience=1.0)
    first = float((v.accepted >= 1).mean())
    second = float((v.accepted >= 2).sum() / max((v.accepted >= 1).sum(), 1))
    for seen, p, k in ((first, float(want[0]), m), (second, float(want[1]), int((v.accepted >= 1).sum()))):
        assert abs(seen - p) < 4.5 * np.sqrt(p * (1 - p) / k), (seen, p)
    # lenient at l = e^0.5 keeps the first token with min(1, l p/q)
    vl = verify([rn] * m, [toks] * m, [old_lp] * m, list(u), mode="lenient", lenience=float(np.exp(0.5)))
    pl = float(acceptance(rn[0, toks[0]].unsqueeze(0), ro[0, toks[0]].unsqueeze(0), float(np.exp(0.5)))[0])
    assert abs(float((vl.accepted >= 1).mean()) - pl) < 4.5 * np.sqrt(pl * (1 - pl) / m) + 1e-9


def test_one_position_of_exact_verification_is_distributed_as_the_current_policy(policies):
    """Draft tokens x ~ p_old; exact verification keeps x with min(1, p_new(x)/p_old(x)) and otherwise
    draws from the residual: the token it returns is distributed as p_new (per token, within 4.5
    standard errors over m draws); lenient's return of the dropped token's mass is not."""
    new, old, tok = policies
    p0, m = prompt(tok), 8000
    p_new, p_old = next_probs(new, p0), next_probs(old, p0)
    g = torch.Generator().manual_seed(8)
    x = torch.multinomial(p_old.float(), m, replacement=True, generator=g)
    rn, ro = p_new.log().unsqueeze(0), p_old.log().unsqueeze(0)
    u = torch.rand((m, 1), generator=g, dtype=torch.float64)
    res = torch.rand(m, generator=g, dtype=torch.float64)
    v = verify([rn] * m, [[int(t)] for t in x], [[float(ro[0, t])] for t in x], list(u), mode="exact",
               old_rows=[ro] * m, residual_u=res.tolist())
    out = np.where(v.accepted >= 1, x.numpy(), v.resampled)
    freq = np.bincount(out, minlength=len(p_new)) / m
    p = p_new.numpy()
    assert np.all(np.abs(freq - p) < 4.5 * np.sqrt(p * (1 - p) / m) + 1e-9), np.abs(freq - p).max()
    assert abs(float(v.rejected.mean()) - float((p_old - torch.minimum(p_old, p_new)).sum())) < 0.01


def test_a_draft_serves_once_and_only_on_a_later_version(policies):
    new, _, tok = policies
    shape = SpeculativeShape(SpeculativeConfig())
    backend = HFBackend(new, tok)
    p = prompt(tok)
    shape.generate(new, backend, [p] * 4, [3] * 4, SAMPLING, [11] * 4, 5, tok.pad_token_id)
    same = shape.generate(new, backend, [p] * 4, [3] * 4, SAMPLING, [12] * 4, 5, tok.pad_token_id)
    assert same.metrics["rollout/shape/draft_rows"] == 0  # same version: no draft (it would be a copy)
    later = shape.generate(new, backend, [p] * 6, [3] * 6, SAMPLING, [13] * 6, 6, tok.pad_token_id)
    assert later.metrics["rollout/shape/draft_rows"] == 6  # the 8 drafts of version 5, each used once
    assert (later.columns["draft_tokens"] > 0).all()
    # same weights, so every draft is kept whole
    assert later.metrics["rollout/shape/reused_tokens"] == later.metrics["rollout/shape/draft_tokens"]
    restored = SpeculativeShape(SpeculativeConfig())
    restored.load_state_dict(shape.state_dict())
    assert {k: len(v) for k, v in restored.drafts.items()} == {3: 6}


def test_verify_refuses_exact_without_the_old_rows():
    with pytest.raises(ValueError, match="old rows"):
        verify([torch.zeros((1, 3))], [[0]], [[0.0]], [torch.zeros(1)], mode="exact")
    with pytest.raises(ValueError, match="mode"):
        verify([], [], [], [], mode="greedy")


def test_exact_mode_keeps_one_float_a_token_and_the_drafting_weights_within_their_cap(policies):
    """Exact mode keeps, per draft, its tokens and their log-probabilities (no rows) and, per drafting
    version, one copy of the weights; past `max_draft_mb` the oldest version goes with its drafts."""
    new, _, tok = policies
    backend, p = HFBackend(new, tok), prompt(tok)
    size = nbytes(weights_of(new))
    shape = SpeculativeShape(SpeculativeConfig(max_draft_mb=1.5 * size / 2**20))  # room for one version
    shape.generate(new, backend, [p] * 4, [0] * 4, SAMPLING, [1] * 4, 0, tok.pad_token_id)
    assert set(shape.weights) == {0} and all(len(d.logp) == len(d.tokens) for d in shape.drafts[0])
    assert all(torch.equal(shape.weights[0][k], v) for k, v in new.named_parameters())
    out = shape.generate(new, backend, [p] * 4, [1] * 4, SAMPLING, [2] * 4, 1, tok.pad_token_id)
    kept = [d for v in shape.drafts.values() for d in v]
    assert out.metrics["rollout/shape/drafts_dropped"] == 4 and set(shape.weights) == {1}
    assert len(kept) == 4 and all(d.version == 1 for d in kept)  # the newest stay: the dropped were version 0's
    old = policies[1]
    roomy = SpeculativeShape(SpeculativeConfig())
    roomy.generate(old, HFBackend(old, tok), [p] * 4, [0] * 4, SAMPLING, [1] * 4, 0, tok.pad_token_id)
    where = {k: w.data_ptr() for k, w in roomy.weights[0].items()}
    roomy.generate(new, backend, [p] * 4, [0] * 4, SAMPLING, [2] * 4, 1, tok.pad_token_id)
    assert set(roomy.weights) == {1}  # version 0's drafts were all used: its weights went with them,
    for k, v in new.named_parameters():  # their memory now holds version 1's
        assert torch.equal(roomy.weights[1][k], v) and roomy.weights[1][k].data_ptr() == where[k], k


@pytest.mark.parametrize("damage", ["unknown", "missing", "of another shape"])
def test_drafting_weights_that_do_not_fit_the_model_are_an_error(policies, damage):
    """Exact mode's drafting weights are used strictly: an unknown key, a missing one (which would run the
    current weights' tensor in its place) or a tensor of another shape is an error naming it, before any
    row is verified."""
    from workbench.errors import DataError

    new, old, tok = policies
    p = prompt(tok)
    shape = SpeculativeShape(SpeculativeConfig())
    shape.generate(old, HFBackend(old, tok), [p] * 4, [0] * 4, SAMPLING, [1] * 4, 0, tok.pad_token_id)
    w = shape.weights[0]
    if damage == "unknown":
        w["model.extra_head.weight"] = torch.zeros(2)
    elif damage == "missing":
        del w["model.norm.weight"]
    else:
        w["model.norm.weight"] = torch.zeros(3)
    with pytest.raises(DataError, match=f"policy version 0 .*{damage}: model.(extra_head|norm).weight"):
        shape.generate(new, HFBackend(new, tok), [p] * 4, [0] * 4, SAMPLING, [2] * 4, 1, tok.pad_token_id)


def test_lenient_rows_are_marked_as_such_and_exact_rows_too(policies):
    """Each drafted row stores the mode it was verified under (lenient: not the current policy's sample);
    a row without a draft stores none."""
    new, old, tok = policies
    p = prompt(tok)
    for mode in ("exact", "lenient"):
        shape = SpeculativeShape(SpeculativeConfig(mode=mode))
        first = shape.generate(old, HFBackend(old, tok), [p] * 4, [0] * 4, SAMPLING, [1] * 4, 0, tok.pad_token_id)
        assert first.columns["draft_mode"].tolist() == [None] * 4  # nothing to draft from yet
        out = shape.generate(new, HFBackend(new, tok), [p] * 6, [0] * 6, SAMPLING, [2] * 6, 1, tok.pad_token_id)
        assert out.columns["draft_mode"].tolist() == [mode] * 4 + [None] * 2  # 4 drafts for 6 rows


def test_policy_rows_in_chunks_equal_one_pass(policies):
    new, old, tok = policies
    p = prompt(tok)
    resp = [[5, 6, 2], [7], [8, 9]]
    whole = policy_rows(new, [p] * 3, resp, SAMPLING, tok.pad_token_id)
    small = policy_rows(new, [p] * 3, resp, SAMPLING, tok.pad_token_id, max_logits=1)  # one row a pass
    for a, b in zip(whole, small):
        assert a.shape == (len(b), new.config.vocab_size) and torch.allclose(a, b, atol=1e-5)


class _Other:
    """A backend that is not an in-process HFBackend over the policy (as vLLM or Ray would be): the shape
    verifies on the policy and the backend samples the rest from prompt + kept prefix."""

    def __init__(self, model, tok):
        self.inner = HFBackend(model, tok)
        self.eos_token_ids = self.inner.eos_token_ids

    def generate(self, prompts, sampling, **kw):
        return self.inner.generate(prompts, sampling, **kw)


@pytest.mark.parametrize("mode", ["lenient", "exact"])
def test_the_cached_continuation_equals_sampling_the_rest_from_prompt_and_prefix(policies, mode):
    """The rows continued from the verification pass's cache (cropped, each row's dropped columns
    masked) get the tokens a backend samples from prompt + kept prefix with the same draws: every token
    in lenient mode; in exact mode the kept prefix and the residual token (the draws after it are
    offset by one there). After the verification no forward pass sees more than one new token."""
    new, old, tok = policies
    p, q = prompt(tok), prompt(tok, "9+9=")
    prompts, keys = [p] * 6 + [q] * 6, [0] * 6 + [1] * 6
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6)
    outs = []
    for other in (False, True):
        shape = SpeculativeShape(SpeculativeConfig(mode=mode, spec_bias=0.0))
        shape.generate(old, HFBackend(old, tok), prompts, keys, sampling, [5] * 6 + [6] * 6, 0, tok.pad_token_id)
        seen, own = [], new.model.norm.weight.data_ptr()  # the forward passes of the current weights
        hook = new.register_forward_pre_hook(
            lambda m, a, kw: seen.append(kw["input_ids"].shape[1]) if m.model.norm.weight.data_ptr() == own else None,
            with_kwargs=True)
        try:
            backend = _Other(new, tok) if other else HFBackend(new, tok)
            outs.append(shape.generate(new, backend, prompts, keys, sampling, [7] * 6 + [8] * 6, 1, tok.pad_token_id))
        finally:
            hook.remove()
        if not other:
            assert len(seen) > 3 and all(w == 1 for w in seen[2:]), seen  # prefill, drafts, one token a step
    cached, plain = outs
    assert 0 < cached.metrics["rollout/shape/rejected"] < 12
    for name in ("reused_tokens", "draft_tokens", "draft_rejected_at"):
        assert np.array_equal(cached.columns[name], plain.columns[name]), name
    a, b = cached.batch, plain.batch
    for i in range(12):
        n = int(a.lengths[i]) if mode == "lenient" else int(cached.columns["reused_tokens"][i]) + 1
        n = min(n, int(a.lengths[i]))
        assert a.tokens[i, :n].tolist() == b.tokens[i, :n].tolist(), i
        assert torch.allclose(a.logprobs[i, :n], b.logprobs[i, :n], atol=1e-4), i
    if mode == "lenient":
        assert torch.equal(a.lengths, b.lengths) and torch.equal(a.finished, b.finished)


def test_the_verification_pass_in_chunks_equals_one_pass(policies):
    from workbench.rollout.shapes.draft_pass import check_drafts

    new, old, tok = policies
    p = prompt(tok)
    drafts = [[5, 6, 2], [], [8, 9], [7, 7, 7]]
    old_lp = [[-1.0] * len(d) for d in drafts]
    u = [torch.full((3,), 0.5, dtype=torch.float64)] * 4
    with torch.inference_mode():
        whole = check_drafts(new, [p] * 4, drafts, old_lp, u, 1.0, SAMPLING, tok.pad_token_id)
        small = check_drafts(new, [p] * 4, drafts, old_lp, u, 1.0, SAMPLING, tok.pad_token_id, max_logits=1)
    assert np.array_equal(whole.accepted, small.accepted) and np.array_equal(whole.rejected, small.rejected)
    assert whole.accepted[1] == 0 and not whole.rejected[1]
    for a, b in zip(whole.logp, small.logp):
        assert np.allclose(a, b, atol=1e-5)
    assert torch.allclose(whole.state.logits, small.state.logits, atol=1e-4)


def test_the_drafting_weights_rows_at_the_rejected_positions_equal_whole_sequences(policies):
    """`prefix_logits` (distinct prompts prefilled once, prefixes as right-padded columns, logits kept at
    each row's end) through the old weights' `functional_call` on the current module: the old model's
    logits after each whole prompt + prefix."""
    from workbench.rollout.shapes.draft_pass import prefix_logits
    from workbench.rollout.shapes.tree import last_logits

    new, old, tok = policies
    p, q = prompt(tok), prompt(tok, "12+30=")
    prompts, prefixes = [p, p, q, p, q], [[5, 6], [], [7], [5, 6, 2], [7, 8]]
    weights = weights_of(old)
    with torch.inference_mode():
        got = prefix_logits(lambda **kw: torch.func.functional_call(new, weights, (), kw, tie_weights=True),
                            new.config, prompts, prefixes, tok.pad_token_id, torch.device("cpu"))
    want = last_logits(old, tok.pad_token_id)([a + b for a, b in zip(prompts, prefixes)])
    assert torch.allclose(got, want, atol=1e-4)
    assert not torch.allclose(got, last_logits(new, tok.pad_token_id)([a + b for a, b in zip(prompts, prefixes)]),
                              atol=1e-2)
