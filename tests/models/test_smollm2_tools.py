"""SmolLM2-135M-Instruct with the calculator in the Hermes syntax (configs/smollm2-tools.toml,
docs/episodes-smollm2.md): a call's closing tag of several tokens ends the turn, the real calculator
answers in its sandbox, the result is fed back as the ChatML user turn of `tools.result_template` (exactly
what the chat template renders for that conversation), the loss mask leaves every fed token out, and the
episode reads back from the store as written; and one engine step of the config stores its episodes.

The untrained model does not call the tool by itself (docs/episodes-smollm2.md), so the episode of the
first test is the model's own turns' tokens as the shape decodes them, written by hand, not sampled: no
test here depends on which tokens a sampler draws."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from workbench.config import load_config
from workbench.episodes import episode_rows
from workbench.rollout.episode_decode import EpisodeBatch, RowTurn
from workbench.rollout.shapes.episodes import EpisodeShape, flatten
from workbench.store import StepRecord, open_store

pytestmark = pytest.mark.slow

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "smollm2-tools.toml"
QUESTION = "A shop packs 37 boxes with 48 pens in each box. How many pens does the shop pack?"
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "37*48"}}</tool_call>'


@pytest.fixture(scope="module")
def tok(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def _ids(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def test_a_hermes_call_is_fed_back_as_a_chatml_turn_masked_and_stored(tok, tmp_path):
    cfg = load_config(CONFIG)
    shape = EpisodeShape(cfg.rollout.episodes, cfg.tools, tok, cfg.sampling.max_new_tokens)
    call_ids = _ids(tok, CALL)
    # `</tool_call>` is several tokens: the shape sees the end of a call by decoding the turn's tail
    assert len(_ids(tok, "</tool_call>")) > 1 and shape.call_end_ids == []
    assert shape.ends_call(call_ids) and not shape.ends_call(call_ids[:-1])
    try:
        call = shape.run_tool(tok.decode(call_ids))  # the real calculator, in its sandbox
    finally:
        shape.close()
    assert (call.name, call.result, call.error) == ("calculator", "1776", None)
    fed = shape.result_tokens(call)
    prompt = tok.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True,
                                     tokenize=False)
    whole = tok.apply_chat_template([{"role": "user", "content": QUESTION}, {"role": "assistant", "content": CALL},
                                     {"role": "user", "content": "<tool_response>1776</tool_response>"}],
                                    add_generation_prompt=True, tokenize=False)
    prompt_ids, answer_ids = _ids(tok, prompt), _ids(tok, "The shop packs 1776 pens.<|im_end|>")
    # what the model reads is what the chat template renders for the conversation, token for token
    assert tok.decode(prompt_ids + call_ids + fed) == whole
    assert prompt_ids + call_ids + fed == _ids(tok, whole)

    def said(ids, reason):
        return RowTurn("assistant", ids, logprobs=[-0.5] * len(ids), entropy=[1.25] * len(ids), finish_reason=reason)
    first = said(call_ids, "tool_call")
    first.call = call
    eb = EpisodeBatch(turns=[[first, RowTurn("tool", fed, call=call), said(answer_ids, "stop")]],
                      finish_reasons=["stop"], gen_time_s=1.0, tool_time_s=0.0)
    batch, mask = flatten(eb, tok.pad_token_id)
    want = [True] * len(call_ids) + [False] * len(fed) + [True] * len(answer_ids)
    assert mask[0].tolist() == want and batch.tokens[0].tolist() == call_ids + fed + answer_ids
    assert batch.logprobs[0][~mask[0]].abs().sum() == 0 and batch.entropy[0][~mask[0]].abs().sum() == 0
    ep = shape.episodes(eb, [prompt_ids])[0]
    ep.validate()
    assert [t.role for t in ep.turns] == ["user", "assistant", "tool", "assistant"]
    assert ep.loss_mask() == want and ep.tool_tokens == len(fed) and ep.model_tokens == len(call_ids + answer_ids)
    assert ep.turns[1].tool_calls == [call] and ep.turns[2].text == "1776"
    # the task judges only what follows the last tool result, read as the engine reads a response
    from workbench.tasks import get_task
    from workbench.tasks.base import Prompt

    task, text = get_task(dict(cfg.task)), tok.decode(batch.tokens[0].tolist(), skip_special_tokens=True)
    question = Prompt(id="q", text=QUESTION, answer="1776")
    assert task.verify(text, question).correct
    assert task.verify(tok.decode(call_ids + fed, skip_special_tokens=True), question).verdict == "no_answer"
    # stored and read back exactly, the tool turn untrained
    with open_store(tmp_path) as st:
        rid = st.create_run("smollm2-tools", {}, seed=0)
        turns, calls = episode_rows(ep, {"stage": 0, "prompt_id": "p", "idx": 0})
        st.write_step(StepRecord(rid, 1, {"rollout/count": 1}, [
            {"stage": 0, "prompt_id": "p", "idx": 0, "response": text, "reward": 1.0, "correct": True,
             "length": len(want), **ep.summary()}], turns=turns, tool_calls=calls))
        back = st.episode(rid, 1, 0, "p", 0)
    assert back == ep and back.loss_mask() == want
    assert not any(back.turns[2].trained()) and back.turns[2].token_ids == fed


def test_one_engine_step_stores_episodes_whose_tokens_are_the_rollouts(smollm2_dir, tok, new_store, tmp_path):
    from workbench.engine import run
    from workbench.engine.checkpoint import checkpoint_dir

    store = new_store(tmp_path / "store")
    cfg = load_config(CONFIG, ["steps=1", "allocator.prompts_per_step=2", "allocator.budget=4",
                               "allocator.params.n=2", "sampling.max_new_tokens=6", "eval.at_start=false",
                               "eval.every=0", "model.threads=1", 'model.device="cpu"'])
    rid = run(cfg, store=str(store))
    shutil.rmtree(checkpoint_dir(store, rid))  # the final checkpoint is ~1.6 GB
    with open_store(str(store)) as st:
        rows = st.rollouts(rid, limit=100)
        keys = [(r["step"], r["stage"], r["prompt_id"], r["idx"]) for r in rows.to_dicts()]
        eps = st.episodes(rid, keys)
    assert rows.height == 4 and set(rows["shape"]) == {"episodes"}
    for r, key in zip(rows.to_dicts(), keys):
        ep = eps[key]
        assert ep.response_token_ids() == r["token_ids"] and r["length"] == ep.model_tokens + ep.tool_tokens
        assert ep.turns[0].role == "user" and tok.decode(ep.turns[0].token_ids).endswith("<|im_start|>assistant\n")
        for t in ep.response_turns:  # every tool turn is fed, never trained; every assistant token is
            assert all(t.trained()) if t.role == "assistant" else not any(t.trained())
