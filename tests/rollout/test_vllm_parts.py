"""The vLLM backend's parts that run without vLLM or a GPU: the missing-piece messages, requests built
from groups, outputs converted to our GenerationBatch, entropy from the trainer's forward pass. The
backend itself needs vLLM and CUDA (`-m gpu`), and is skipped here with the reason."""

import importlib.util
import math
from types import SimpleNamespace

import pytest
import torch

from workbench.errors import WorkbenchError
from workbench.rollout import require
from workbench.rollout.base import SamplingParams
from workbench.rollout.hf import HFBackend
from workbench.rollout.vllm_backend import (LogprobGap, VLLMBackend, build_requests, outputs_to_batch,
                                            plain_outputs, require_cuda, sampling_kwargs, trainer_scores,
                                            weight_loader)
from workbench.vllm_limits import VLLM_WINDOW, version_problem
from f32 import assert_f32_close

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
VLLM_MODEL = dict(hidden=256)
"""The GPU test's model (`make_model` options): head size 64, which vLLM's attention backends take."""


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
def test_trainer_scores_equal_the_samplers(model, tokenizer, prompts, sampling):
    """Entropy and sampled-token log-probs from one forward pass of the trainer's model = those the HF
    loop sampled with; so the engine gap of the same model against itself is nil."""
    rows = [p for p in prompts for _ in range(3)]
    out = HFBackend(model, tokenizer).generate(rows, sampling, seeds=[i // 3 for i in range(len(rows))])
    ent, lp = trainer_scores(model, rows, out, sampling, pad_token_id=0, chunk=5)
    assert_f32_close(ent, out.entropy, terms=18)
    assert_f32_close(lp, out.logprobs, terms=18)
    for i, n in enumerate(out.lengths.tolist()):
        assert (ent[i, n:] == 0).all() and (lp[i, n:] == 0).all()
    gap = LogprobGap()
    gap.add(out.logprobs, lp, out.lengths)
    m = gap.take()
    assert m["rollout/vllm_kl_k3"] < 1e-5 and m["rollout/vllm_ratio_outside_frac"] == 0
    assert gap.take() == {}  # reset; nothing scored since


def test_logprob_gap_equals_a_plain_loop():
    g = torch.Generator().manual_seed(0)
    behaviour, trainer = -torch.rand(5, 7, generator=g) * 3, -torch.rand(5, 7, generator=g) * 3
    lengths = torch.tensor([7, 0, 3, 5, 1])
    gap = LogprobGap()
    gap.add(behaviour[:2], trainer[:2], lengths[:2])  # one step, two stages
    gap.add(behaviour[2:], trainer[2:], lengths[2:])
    k3, outside, n = 0.0, 0, 0
    for i in range(5):
        for t in range(int(lengths[i])):
            r = math.exp(float(trainer[i, t]) - float(behaviour[i, t]))
            k3 += r - 1 - math.log(r)
            outside += not 0.5 <= r <= 2
            n += 1
    m = gap.take()
    assert m["rollout/vllm_kl_k3"] == pytest.approx(k3 / n, rel=1e-6) and m["rollout/vllm_kl_k3"] > 0
    assert m["rollout/vllm_ratio_outside_frac"] == outside / n and 0 < outside < n


@pytest.mark.parametrize("version, ok", [("0.10.0", False), ("0.10.1.1", False), ("0.10.2", True),
                                         ("0.11.0rc1", True), ("0.33.0", True), ("0.33.0+cu129", True),
                                         ("0.34.0", False), ("not-a-version", False)])
def test_version_window(version, ok):
    """0.10.2 is the first release whose processed log-probs come after temperature (vLLM PR #22387)."""
    problem = version_problem(version)
    assert (problem is None) == ok
    if not ok:
        assert f"vLLM {version} is installed" in problem and "vllm>=0.10.2,<0.34" in problem


def test_the_gpu_extra_pins_the_window_the_backend_checks():
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["gpu"] == ["vllm" + ",".join(VLLM_WINDOW)]


def test_seeds_leave_room_for_n_samples_in_int64():
    """vLLM seeds sample i of a request with seed + i, kept in an int64: no group seed may overflow."""
    from workbench.rollout.base import group_seed

    seeds = [2**63 - 1, 2**64 - 1, 2**62, 0] + [group_seed(0, step, 0, p) for step in range(50) for p in range(20)]
    for seed in seeds:
        kw = sampling_kwargs(SamplingParams(), 1024, seed, [2])
        assert 0 <= kw["seed"] and kw["seed"] + 1024 - 1 < 2**63
    assert len({sampling_kwargs(SamplingParams(), 8, s, [2])["seed"] for s in seeds[4:]}) == len(set(seeds[4:]))


class _Core:
    def __init__(self):
        self.shutdowns = 0

    def shutdown(self):
        self.shutdowns += 1


def test_close_shuts_the_engine_down_once_and_refuses_to_generate_after():
    """vLLM's LLM holds its engine core at `llm.llm_engine.engine_core` (0.10.2 to 0.33.0); that object
    stands in here, as vLLM needs CUDA."""
    core = _Core()
    backend = VLLMBackend(SimpleNamespace(llm_engine=SimpleNamespace(engine_core=core)), eos_token_ids=[2],
                          pad_token_id=0)
    backend.close()
    backend.close()
    assert core.shutdowns == 1 and backend.llm is None
    with pytest.raises(WorkbenchError, match="generate after close"):
        backend.generate([[1, 5]], SamplingParams(), seeds=[3])
    backend.offload()  # nothing to put to sleep any more


def test_weights_never_go_through_apply_model():
    """Without an in-process worker the backend refuses (LLM.apply_model would pickle CUDA tensors)."""
    llm = SimpleNamespace(llm_engine=SimpleNamespace(model_executor=None),
                          apply_model=lambda f: pytest.fail("apply_model was called"))
    backend = VLLMBackend(llm, eos_token_ids=[2], pad_token_id=0)
    with pytest.raises(WorkbenchError, match="not sent through LLM.apply_model"):
        backend.load_weights([("w", torch.zeros(2))])


def test_weight_loader_prefers_vllms_in_place_reload():
    """0.33.0's runner takes `reload_weights(weights_iterator=...)`; 0.10.2 to 0.11's re-reads the
    checkpoint only, so the model's own `load_weights` is used there."""
    got = []

    class NewRunner:
        def reload_weights(self, weights_iterator=None, weights_path=None, is_checkpoint_format=True):
            got.append(list(weights_iterator))

    class OldRunner:
        model = SimpleNamespace(load_weights=lambda named: got.append(("load_weights", named)))

        def reload_weights(self):
            pytest.fail("reloads from disk")

    new = SimpleNamespace(model_runner=NewRunner())
    new.reload_weights = lambda **kw: new.model_runner.reload_weights(**kw)
    weight_loader(new)([("a", 1)])
    weight_loader(SimpleNamespace(model_runner=OldRunner()))([("b", 2)])
    assert got == [[("a", 1)], ("load_weights", [("b", 2)])]
    assert weight_loader(None) is None and weight_loader(SimpleNamespace(model_runner=None)) is None


def test_vllm_workers_get_the_trainers_dtype_and_the_run_seed():
    """Ray workers hosting vLLM are built with the trainer's dtype ("auto" would load the float32
    organism as bfloat16) and the run's seed; HF workers get no vLLM options."""
    from workbench.config import load_config
    from workbench.rollout.ray_backend import RayOptions

    cfg = load_config(None, ['rollout.backend="ray"', 'rollout.worker_backend="vllm"', "seed=7"])
    assert RayOptions.from_config(cfg).vllm_options("float32") == dict(
        gpu_memory_utilization=cfg.rollout.gpu_memory_utilization, sleep=False, dtype="float32", seed=7)
    assert RayOptions.from_config(load_config(None, ['rollout.backend="ray"'])).vllm_options("float32") is None


def test_the_gpu_tests_model_has_a_head_size_vllm_can_run(model_factory):
    """vLLM's Triton attention needs head size >= 32 and FlashInfer one of 64/128/256: the GPU test's
    model has 64 (the CPU tests' tiny model has 8)."""
    cfg = model_factory(**VLLM_MODEL).config
    assert cfg.hidden_size // cfg.num_attention_heads == 64


@pytest.mark.gpu
@pytest.mark.skipif(not (HAVE_VLLM and torch.cuda.is_available()), reason="needs vllm (the 'gpu' extra) and CUDA")
def test_vllm_backend_matches_hf_greedy(tmp_path, model_factory, tokenizer, prompts):
    """On a GPU: the tiny model saved to disk, generated greedily by vLLM and by our HF loop."""
    from workbench.rollout.vllm_backend import VLLMBackend

    model = model_factory(**VLLM_MODEL)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    local = HFBackend(model, tokenizer)
    backend = VLLMBackend.from_path(str(tmp_path), local=local, gpu_memory_utilization=0.2, sleep=False,
                                    dtype="float32")
    greedy = SamplingParams(top_k=1, max_new_tokens=8)
    seeds = list(range(len(prompts)))
    try:
        got, want = backend.generate(prompts, greedy, seeds=seeds), local.generate(prompts, greedy, seeds=seeds)
        assert torch.equal(got.tokens, want.tokens)
        assert_f32_close(got.logprobs, want.logprobs, terms=64)
        assert set(backend.take_metrics()) == {"rollout/vllm_kl_k3", "rollout/vllm_ratio_outside_frac"}
    finally:
        backend.close()
