"""NeMo-RL training samples as episodes (the message log written by NeMo-RL's own code,
tests/fixtures/nemo_rl/README.md): the prompt, each generated assistant message and each environment
observation are turns whose tokens, laid end to end, are the logged `token_ids` up to `input_lengths`,
with the loss mask NeMo-RL trained with and its generation log-probs on the assistant turns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.integrations import import_path

NEMO = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_rl"


@pytest.fixture
def store(tmp_path):
    from workbench.store import open_store

    with open_store(tmp_path / "store") as s:
        yield s


def runs_of_ones(mask: list[int]) -> int:
    return sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))


@pytest.mark.parametrize("run", ["math", "multiturn"])
def test_message_logs_are_episodes_token_for_token(store, run):
    rid = import_path(store, "nemo-rl", NEMO / run)["run_id"]
    texts = dict(zip(store.prompts(rid)["prompt_id"], store.prompts(rid)["text"]))
    for step in (1, 2):
        logged = [json.loads(x) for x in (NEMO / run / f"train_data_step{step}.jsonl").read_text().splitlines()]
        want = []
        for line in logged:
            n = line["input_lengths"][0]
            mask = line["token_loss_mask"][0][:n]
            turns = runs_of_ones(mask)
            content = line["content"][0]
            msgs = ["".join(content[: len(content) - 2 * turns]), *content[len(content) - 2 * turns:]]
            lp = [round(x, 5) for x, m in zip(line["generation_logprobs"][0][:n], mask) if m]
            want.append((tuple(msgs), tuple(line["token_ids"][0][:n]), tuple(bool(m) for m in mask), tuple(lp)))
        rolls = store.rollouts(rid, step_min=step, step_max=step, limit=1000)
        got = []
        for r in rolls.iter_rows(named=True):
            ep = store.episode(rid, step, 0, r["prompt_id"], r["idx"])
            assert ep.turns[0].text == texts[r["prompt_id"]] and ep.prompt_turns == 1
            assert [t.role for t in ep.turns] == ["user"] + ["assistant", "tool"] * ((len(ep.turns) - 1) // 2)
            assert (r["turns"], r["tool_calls"], r["tool_tokens"]) == (len(ep.turns), 0, ep.tool_tokens)
            mask = [m for t in ep.turns for m in t.trained(t is ep.turns[0])]
            lp = [round(x, 5) for t in ep.turns if t.logprobs for x in t.logprobs]
            got.append((tuple(t.text for t in ep.turns), tuple(x for t in ep.turns for x in t.token_ids),
                        tuple(mask), tuple(lp)))
        assert sorted(got) == sorted(want) and len(got) == len(logged) == 12
        assert max(len(g[0]) for g in got) == (5 if run == "multiturn" else 3)
