"""HFBackend: logprobs/entropy match a full forward pass, greedy matches generate, EOS, padding, seeds."""

import pytest
import torch

from workbench.algorithms import pack_sequences, sequence_logprobs
from workbench.errors import WorkbenchError
from workbench.rollout import RolloutBackend, make_backend
from workbench.rollout.base import SamplingParams
from workbench.rollout.hf import HFBackend, bare_generate, generator_for, sampling_logprobs
from f32 import assert_f32_close

SAMPLE = SamplingParams(temperature=0.9, max_new_tokens=12)
GREEDY = SamplingParams(top_k=1, max_new_tokens=12)


def _gen(backend, prompts, sampling, seed=0):
    return backend.generate(prompts, sampling, generator=torch.Generator().manual_seed(seed))


def test_is_a_rollout_backend(model, tokenizer):
    backend = HFBackend(model, tokenizer)
    assert isinstance(backend, RolloutBackend)
    # the optional part of the interface, which the engine calls on every backend: nothing to add here
    backend.expected_new_tokens = 3.5
    backend.offload()
    assert backend.take_metrics() == {} and backend.take_events() == []
    backend.close()


def test_the_pipeline_generator_of_the_in_process_backend_keeps_the_contract(model, tokenizer, prompts,
                                                                             model_factory):
    """`generator_backend("thread")`: a backend of the same contract over a copy of the weights, starting
    at the trainer's version; `load_state` gives it other weights and leaves the trainer's backend alone.
    A backend that never cuts a batch refuses to continue one."""
    from workbench.rollout.base import check_offset

    backend = HFBackend(model, tokenizer)
    backend.policy_version = 3
    gen = backend.generator_backend("thread", threads=1)
    assert isinstance(gen, RolloutBackend) and gen.interruptible and gen.policy_version == 3 and gen.model is not model
    rows = [p for p in prompts for _ in range(2)]
    seeds = [11 + i // 2 for i in range(len(rows))]
    assert torch.equal(gen.generate(rows, SAMPLE, seeds=seeds).tokens, backend.generate(rows, SAMPLE, seeds=seeds).tokens)
    other = model_factory(seed=3)
    gen.load_state(other.state_dict(), 4)
    want = HFBackend(other, tokenizer).generate(rows, SAMPLE, seeds=seeds).tokens
    assert gen.policy_version == 4 and torch.equal(gen.generate(rows, SAMPLE, seeds=seeds).tokens, want)
    assert backend.policy_version == 3 and not torch.equal(backend.generate(rows, SAMPLE, seeds=seeds).tokens, want)
    with pytest.raises(WorkbenchError, match="pipeline.generator: 'fork'"):
        backend.generator_backend("fork", threads=1)
    check_offset(backend, 0)
    with pytest.raises(WorkbenchError, match="offset 3 continues a cut batch"):
        check_offset(backend, 3)


def test_the_engine_needs_every_part_of_the_interface():
    class Partial:  # generate and update_weights only: not a backend the engine can drive
        policy_version = 0

        def generate(self, prompts, sampling, *, generator=None, seeds=None): ...

        def update_weights(self, model): ...

    assert not isinstance(Partial(), RolloutBackend)


def _full_forward(model, prompts, out, sampling):
    """Distribution of every generated token recomputed by one padded forward pass of the whole sequence."""
    packed = pack_sequences(prompts, out.tokens, out.lengths, pad_token_id=0)
    with torch.no_grad():
        pos = (packed.attention_mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=packed.input_ids, attention_mask=packed.attention_mask,
                       position_ids=pos).logits[:, packed.response_start - 1 : -1]
    n, t, v = logits.shape
    logp = sampling_logprobs(logits.reshape(n * t, v), sampling).reshape(n, t, v)
    return packed, logp


@pytest.mark.parametrize("compact", [0.0, 1.0])
@pytest.mark.parametrize("sampling", [SAMPLE, SamplingParams(temperature=1.3, top_k=5, top_p=0.8,
                                                             max_new_tokens=12)])
def test_logprobs_and_entropy_match_full_forward(model, tokenizer, prompts, sampling, compact):
    out = _gen(HFBackend(model, tokenizer, compact_below=compact), prompts * 4, sampling)
    packed, logp = _full_forward(model, prompts * 4, out, sampling)
    m = packed.response_mask.bool()
    want_lp = logp.gather(-1, out.tokens.unsqueeze(-1)).squeeze(-1)
    want_ent = torch.special.entr(logp.exp()).sum(-1)
    assert m.sum() > 3 * len(prompts)
    # a KV-cache step vs one forward pass of the whole sequence: other shapes, other summation orders
    assert_f32_close(out.logprobs[m], want_lp[m], terms=512)
    assert_f32_close(out.entropy[m], want_ent[m], terms=512)
    assert (out.logprobs[~m] == 0).all() and (out.entropy[~m] == 0).all()


def test_logprobs_match_trainer_helper(model, tokenizer, prompts):
    """Without truncation the sampler's logprobs are what the trainer's sequence_logprobs computes."""
    out = _gen(HFBackend(model, tokenizer), prompts, SAMPLE)
    packed = pack_sequences(prompts, out.tokens, out.lengths, pad_token_id=0)
    with torch.no_grad():
        lp, _ = sequence_logprobs(model, packed.input_ids, packed.attention_mask, packed.response_start,
                                  response_mask=packed.response_mask, temperature=SAMPLE.temperature)
    assert_f32_close(out.logprobs, lp, terms=512)


def test_greedy_matches_transformers_generate(model, tokenizer, prompts):
    out = _gen(HFBackend(model, tokenizer), prompts, GREEDY)
    bare = bare_generate(model, tokenizer, prompts, GREEDY)
    assert set(out.finish_reasons()) == {"stop", "length"} and len({tuple(r) for r in out.tokens.tolist()}) > 3
    width = max(out.tokens.shape[1], bare.tokens.shape[1])
    pad = lambda x: torch.nn.functional.pad(x, (0, width - x.shape[1]), value=tokenizer.pad_token_id)  # noqa: E731
    assert torch.equal(pad(out.tokens), pad(bare.tokens))
    assert (out.logprobs <= 0).all() and (out.entropy == 0).all()  # top_k=1: a one-point distribution


def test_left_padding_equals_generating_alone(model, tokenizer, prompts):
    backend = HFBackend(model, tokenizer)
    batch = _gen(backend, prompts, GREEDY)
    assert len(set(batch.lengths.tolist())) > 1
    for i, p in enumerate(prompts):
        alone = _gen(backend, [p], GREEDY)
        n = int(alone.lengths[0])
        assert int(batch.lengths[i]) == n
        assert batch.tokens[i, :n].tolist() == alone.tokens[0, :n].tolist()
        assert_f32_close(batch.logprobs[i, :n], alone.logprobs[0, :n], terms=512)


def test_repeated_prompts_prefilled_once_equal_generating_alone(model, tokenizer, prompts):
    """A GRPO batch (each prompt several times, interleaved) is prefilled once per distinct prompt;
    every copy still generates what the prompt generates alone."""
    backend = HFBackend(model, tokenizer)
    order = [0, 1, 0, 2, 1, 0, 2, 2] if len(prompts) >= 3 else [0, 1, 0, 1]
    batch = _gen(backend, [prompts[i] for i in order], GREEDY)
    for row, i in enumerate(order):
        alone = _gen(backend, [prompts[i]], GREEDY)
        n = int(alone.lengths[0])
        assert int(batch.lengths[row]) == n
        assert batch.tokens[row, :n].tolist() == alone.tokens[0, :n].tolist()
        assert_f32_close(batch.logprobs[row, :n], alone.logprobs[0, :n], terms=512)
        assert_f32_close(batch.entropy[row, :n], alone.entropy[0, :n], terms=512)


def test_eos_stop_and_finish_reasons(model, tokenizer, prompts):
    out = _gen(HFBackend(model, tokenizer), prompts * 8, SamplingParams(max_new_tokens=6), seed=3)
    reasons = out.finish_reasons()
    assert set(reasons) == {"stop", "length"}
    for i, reason in enumerate(reasons):
        n = int(out.lengths[i])
        row = out.tokens[i].tolist()
        if reason == "stop":
            assert row[n - 1] == tokenizer.eos_token_id and tokenizer.eos_token_id not in row[: n - 1]
            assert row[n:] == [tokenizer.pad_token_id] * (len(row) - n)
        else:
            assert n == 6 and tokenizer.eos_token_id not in row


def test_stops_early_when_every_sequence_finished(model, tokenizer, prompts):
    stoppers = list(range(2, 18))  # nearly every token ends the sequence
    backend = HFBackend(model, tokenizer, eos_token_ids=stoppers)
    out = _gen(backend, prompts, SamplingParams(max_new_tokens=40))
    assert out.finished.all()
    assert out.tokens.shape[1] == int(out.lengths.max()) < 40


def test_seeded_generator_is_deterministic(model, tokenizer, prompts):
    backend = HFBackend(model, tokenizer)
    a, b = _gen(backend, prompts * 4, SAMPLE, seed=7), _gen(backend, prompts * 4, SAMPLE, seed=7)
    c = _gen(backend, prompts * 4, SAMPLE, seed=8)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.logprobs, b.logprobs)
    assert not torch.equal(a.tokens, c.tokens)


def test_top_k_and_top_p_restrict_the_support(model, tokenizer, prompts):
    backend = HFBackend(model, tokenizer)
    greedy = _gen(backend, prompts, GREEDY)
    tiny_p = _gen(backend, prompts, SamplingParams(top_p=1e-6, max_new_tokens=12))
    assert torch.equal(tiny_p.tokens, greedy.tokens)  # the nucleus keeps only the top token
    out = _gen(backend, prompts * 8, SamplingParams(top_k=3, max_new_tokens=12))
    _, logp = _full_forward(model, prompts * 8, out, SamplingParams(max_new_tokens=12))
    rank = (logp > logp.gather(-1, out.tokens.unsqueeze(-1))).sum(-1)
    m = (torch.arange(out.tokens.shape[1]) < out.lengths.unsqueeze(1))
    assert rank[m].max() <= 2 and rank[m].max() > 0
    assert (out.entropy[m] <= torch.log(torch.tensor(3.0)) + 1e-5).all()


def test_mode_restored_and_weights(model, tokenizer, prompts, model_factory):
    backend = HFBackend(model, tokenizer)
    model.train()
    try:
        a = _gen(backend, prompts, GREEDY)
        assert model.training
    finally:
        model.eval()
    backend.update_weights(model)
    assert backend.policy_version == 1
    other = model_factory(seed=3)
    backend2 = HFBackend(model_factory(seed=2), tokenizer)
    want = _gen(HFBackend(other, tokenizer), prompts, GREEDY).tokens
    assert not torch.equal(_gen(backend2, prompts, GREEDY).tokens, want)
    backend2.update_weights(other)
    assert backend2.policy_version == 1
    assert torch.equal(_gen(backend2, prompts, GREEDY).tokens, want)
    assert torch.equal(a.tokens, _gen(backend, prompts, GREEDY).tokens)


@pytest.mark.parametrize("field,value", [("temperature", 0.0), ("top_p", 0.0), ("top_p", 1.5), ("top_k", -1),
                                         ("max_new_tokens", 0)])
def test_bad_sampling_rejected(model, tokenizer, prompts, field, value):
    with pytest.raises(WorkbenchError, match=f"sampling.{field}"):
        HFBackend(model, tokenizer).generate(prompts, SamplingParams(**{field: value}))


def test_empty_prompt_rejected(model, tokenizer):
    with pytest.raises(WorkbenchError, match="at least one token"):
        HFBackend(model, tokenizer).generate([[1], []], GREEDY)


def test_make_backend(model, tokenizer, monkeypatch):
    assert isinstance(make_backend("hf", model, tokenizer, "cpu"), HFBackend)
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("ray", "vllm") else real(name, *a))
    with pytest.raises(WorkbenchError, match=r"package 'vllm' is not installed; install the 'gpu' extra"):
        make_backend("vllm", model, tokenizer, "cpu")
    with pytest.raises(WorkbenchError, match=r"package 'ray' is not installed; install the 'ray' extra"):
        make_backend("ray", model, tokenizer, "cpu")
    with pytest.raises(WorkbenchError, match="valid names: hf, vllm, ray"):
        make_backend("tgi", model, tokenizer, "cpu")
    with pytest.raises(WorkbenchError, match="model is on cpu"):
        HFBackend(model, tokenizer, device="cuda")


def test_bare_generate_samples(model, tokenizer, prompts):
    out = bare_generate(model, tokenizer, prompts * 4, SAMPLE)
    assert out.tokens.shape[0] == 24 and 1 <= out.tokens.shape[1] <= 12 and out.gen_time_s > 0


def test_generator_for_device():
    g = torch.Generator().manual_seed(0)
    assert generator_for(torch.device("cpu"), g) is g and generator_for(torch.device("cpu"), None) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_generation_matches_cpu_greedy(model, tokenizer, prompts, model_factory):
    cuda_model = model_factory().to("cuda")
    out = _gen(HFBackend(cuda_model, tokenizer, device="cuda"), prompts, GREEDY)
    assert torch.equal(out.tokens, _gen(HFBackend(model, tokenizer), prompts, GREEDY).tokens)
    sampled = [_gen(HFBackend(cuda_model, tokenizer, device="cuda"), prompts, SAMPLE, seed=5) for _ in range(2)]
    assert torch.equal(sampled[0].tokens, sampled[1].tokens)  # a CPU generator seeds CUDA sampling


def test_compaction_changes_nothing_greedy(model, tokenizer, prompts):
    """Dropping finished rows from the batch and cache leaves every greedy output as it was."""
    outs = [_gen(HFBackend(model, tokenizer, compact_below=c), prompts * 3, GREEDY) for c in (0.0, 0.5, 1.0)]
    assert len(set(outs[0].lengths.tolist())) > 2  # rows finish at different times
    for other in outs[1:]:
        assert torch.equal(other.tokens, outs[0].tokens) and torch.equal(other.lengths, outs[0].lengths)
        assert_f32_close(other.logprobs, outs[0].logprobs, terms=512)


def test_group_seeds_make_each_group_independent_of_the_batch(model, tokenizer, prompts):
    """Rows sharing a seed draw from their own stream: a group sampled alone, or in a batch of other
    groups in another order, gets the same tokens (the basis of Ray workers = in-process)."""
    backend = HFBackend(model, tokenizer)
    rows = [p for p in prompts for _ in range(4)]
    seeds = [1000 + i // 4 for i in range(len(rows))]
    full = backend.generate(rows, SAMPLE, seeds=seeds)
    for g in range(len(prompts)):
        alone = backend.generate(rows[4 * g:4 * g + 4], SAMPLE, seeds=seeds[4 * g:4 * g + 4])
        width = alone.tokens.shape[1]
        assert torch.equal(full.tokens[4 * g:4 * g + 4, :width], alone.tokens)
        assert_f32_close(full.logprobs[4 * g:4 * g + 4, :width], alone.logprobs, terms=18)
    order = [4 * g + j for g in reversed(range(len(prompts))) for j in range(4)]
    shuffled = backend.generate([rows[i] for i in order], SAMPLE, seeds=[seeds[i] for i in order])
    back = torch.argsort(torch.tensor(order))
    assert torch.equal(shuffled.tokens[back], full.tokens)
    other = backend.generate(rows, SAMPLE, seeds=[s + 1 for s in seeds])
    assert not torch.equal(other.tokens, full.tokens)
    with pytest.raises(WorkbenchError, match="3 seeds for 24 prompts"):
        backend.generate(rows, SAMPLE, seeds=[1, 2, 3])


def test_inverse_cdf_sampling_follows_the_distribution_and_skips_filtered_tokens():
    from workbench.rollout.hf import inverse_cdf_sample

    logp = torch.log_softmax(torch.tensor([[0.0, 1.0, 2.0, -torch.inf]]), -1).repeat(40000, 1)
    u = torch.rand(40000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    freq = torch.bincount(inverse_cdf_sample(logp, u), minlength=4).double() / 40000
    assert torch.allclose(freq, logp[0].exp().double(), atol=0.01) and freq[3] == 0
    # a draw that rounds to the row's total mass takes the last token with mass, never a filtered one
    assert inverse_cdf_sample(logp[:1], torch.tensor([1 - 1e-17], dtype=torch.float64)).item() == 2
