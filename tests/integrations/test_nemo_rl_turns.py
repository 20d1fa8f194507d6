"""NeMo-RL runs as NeMo-RL's own code logs them (tests/fixtures/nemo_rl/README.md): the assistant turns
are the response, the environment's observations are kept apart, prompts hold the prompt only, and the
groups are the trainer's (prompt repeated), for single- and multi-turn runs."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from workbench.integrations import import_path

NEMO = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_rl"


@pytest.fixture
def store(tmp_path):
    from workbench.store import open_store

    with open_store(tmp_path / "store") as s:
        yield s


def logged(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.parametrize("run,turns", [("math", 1), ("multiturn", 2)])
def test_assistant_turns_are_the_response_and_observations_apart(store, run, turns):
    rid = import_path(store, "nemo-rl", NEMO / run)["run_id"]
    texts = dict(zip(store.prompts(rid)["prompt_id"], store.prompts(rid)["text"]))
    for step in (1, 2):
        lines = logged(NEMO / run / f"train_data_step{step}.jsonl")
        rolls = store.rollouts(rid, step_min=step, step_max=step, limit=1000)
        assert rolls.height == len(lines) == 12
        want = sorted((c[0][0], "".join(c[0][1::2]), tuple(c[0][2::2]), r[0])
                      for c, r in ((x["content"], x["rewards"]) for x in lines))
        got = sorted((texts[p], resp, tuple(obs), rew) for p, resp, obs, rew in
                     rolls.select("prompt_id", "response", "observations", "reward").iter_rows())
        assert got == [(p, resp, obs, pytest.approx(rew)) for p, resp, obs, rew in want]
        assert all(len(o) == turns and o[-1].startswith("Environment: ") for o in rolls["observations"])
        assert not rolls["response"].str.contains("Environment").any()
        # one group per prompt (4 rollouts each), not one per distinct response
        allocs = store.allocations(rid).filter(pl.col("step") == step)
        assert allocs["granted"].to_list() == [4, 4, 4]
        # the response tokens: every generated token (answer + EOS per turn), none of the prompt's
        assert (rolls["length"] == rolls["response"].str.len_chars() + turns).all()
        assert rolls["correct"].to_list() == (rolls["reward"] >= 0.5).to_list()


@pytest.mark.parametrize("run", ["math", "multiturn"])
def test_validation_groups_by_prompt(store, run):
    rid = import_path(store, "nemo-rl", NEMO / run)["run_id"]
    evals = store.evals(rid)
    texts = dict(zip(store.prompts(rid)["prompt_id"], store.prompts(rid)["text"]))
    for step in (0, 2):
        want: dict[str, list[int]] = {}
        for line in logged(NEMO / run / f"val_data_step{step}.jsonl"):
            prompt = line["content"][0][0]["content"]
            n, c = want.get(prompt, [0, 0])
            want[prompt] = [n + 1, c + int(line["rewards"][0] >= 0.5)]
        got = evals.filter(pl.col("step") == step)
        assert {texts[p]: [n, c] for p, n, c in got.select("prompt_id", "samples", "correct").iter_rows()} == want
        assert all(n == 3 for n, _ in want.values())


def test_the_rollouts_page_shows_the_observations_under_the_response(store):
    from app import rollout_view

    rid = import_path(store, "nemo-rl", NEMO / "multiturn")["run_id"]
    rows = store.rollouts(rid, step_min=1, step_max=1, limit=4).to_dicts()
    page = rollout_view.group_html(rows)
    assert page.count("environment: Environment: check your sum") == 4
    assert page.count("environment: Environment: ") == 8
