"""The vLLM backend's parts that run without vLLM or a GPU: the missing-piece messages, requests built
from groups, outputs converted to our GenerationBatch, entropy from the trainer's forward pass. The
backend itself needs vLLM and CUDA (`-m gpu`), and is skipped here with the reason."""

import importlib.util
from types import SimpleNamespace

import pytest
import torch

from workbench.errors import WorkbenchError
from workbench.rollout import require
from workbench.rollout.base import SamplingParams
from workbench.rollout.hf import HFBackend
from workbench.rollout.vllm_backend import (build_requests, outputs_to_batch, plain_outputs, require_cuda,
                                            sampling_kwargs, trainer_entropy)
from f32 import assert_f32_close

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def test_missing_pieces_are_named_in_one_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(WorkbenchError, match=r"package 'vllm' is not installed; install the 'gpu' extra") as e:
        require("vllm")
    assert "\n" not in str(e.value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(WorkbenchError, match="needs a CUDA GPU and none is visible"):
        require_cuda()


def test_requests_one_per_group():
    prompts = [[1, 5], [1, 5], [1, 6], [1, 5], [1, 6]]
    reqs = build_requests(prompts, [10, 10, 20, 10, 20])
    assert [(r.prompt_token_ids, r.n, r.seed, r.rows) for r in reqs] == [([1, 5], 3, 10, [0, 1, 3]),
                                                                          ([1, 6], 2, 20, [2, 4])]
    with pytest.raises(WorkbenchError, match="share seed 10 but not their prompt"):
        build_requests([[1, 5], [1, 6]], [10, 10])
    kw = sampling_kwargs(SamplingParams(temperature=0.7, top_p=0.9, top_k=0, max_new_tokens=8), 3, 10, [2])
    assert kw["n"] == 3 and kw["seed"] == 10 and kw["max_tokens"] == 8 and kw["logprobs"] == 0
    assert kw["stop_token_ids"] == [2] and kw["top_k"] == 0 and kw["temperature"] == 0.7


def _output(ids, finish):
    logprobs = [{t: SimpleNamespace(logprob=-0.1 * (k + 1), rank=1)} for k, t in enumerate(ids)]
    return SimpleNamespace(token_ids=ids, logprobs=logprobs, finish_reason=finish)


def test_outputs_become_a_generation_batch_in_row_order():
    reqs = build_requests([[1, 5], [1, 6], [1, 5]], [10, 20, 10])
    ros = [SimpleNamespace(outputs=[_output([7, 8, 2], "stop"), _output([9], "length")]),
           SimpleNamespace(outputs=[_output([4, 4], "length")])]
    b = outputs_to_batch(reqs, plain_outputs(ros), 3, pad_token_id=0, eos_token_ids=[2], gen_time_s=0.5)
    assert b.tokens.tolist() == [[7, 8, 2], [4, 4, 0], [9, 0, 0]]
    assert b.lengths.tolist() == [3, 2, 1] and b.finished.tolist() == [True, False, False]
    assert_f32_close(b.logprobs[0], torch.tensor([-0.1, -0.2, -0.3]), terms=1)
    assert b.logprobs[2, 1] == 0 and not b.has_entropy
    with pytest.raises(WorkbenchError, match="1 completions for a request of n=2"):
        outputs_to_batch(reqs, [[c] for c in plain_outputs(ros)[0][:1]] + [[]], 3, 0, [2], 0.0)


@pytest.mark.parametrize("sampling", [SamplingParams(temperature=0.9, max_new_tokens=10),
                                      SamplingParams(temperature=1.3, top_k=5, top_p=0.8, max_new_tokens=10)])
def test_trainer_entropy_equals_the_samplers(model, tokenizer, prompts, sampling):
    """Entropy from one forward pass of the trainer's model = the entropy the HF loop sampled with."""
    rows = [p for p in prompts for _ in range(3)]
    out = HFBackend(model, tokenizer).generate(rows, sampling, seeds=[i // 3 for i in range(len(rows))])
    ent = trainer_entropy(model, rows, out, sampling, pad_token_id=0, chunk=5)
    assert_f32_close(ent, out.entropy, terms=18)
    for i, n in enumerate(out.lengths.tolist()):
        assert (ent[i, n:] == 0).all()


@pytest.mark.gpu
@pytest.mark.skipif(not (HAVE_VLLM and torch.cuda.is_available()), reason="needs vllm (the 'gpu' extra) and CUDA")
def test_vllm_backend_matches_hf_greedy(tmp_path, model, tokenizer, prompts):
    """On a GPU: the tiny model saved to disk, generated greedily by vLLM and by our HF loop."""
    from workbench.rollout.vllm_backend import VLLMBackend

    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    local = HFBackend(model, tokenizer)
    backend = VLLMBackend.from_path(str(tmp_path), local=local, gpu_memory_utilization=0.2, sleep=False,
                                    dtype="float32")
    greedy = SamplingParams(top_k=1, max_new_tokens=8)
    seeds = list(range(len(prompts)))
    got, want = backend.generate(prompts, greedy, seeds=seeds), local.generate(prompts, greedy, seeds=seeds)
    assert torch.equal(got.tokens, want.tokens)
    assert_f32_close(got.logprobs, want.logprobs, terms=64)
