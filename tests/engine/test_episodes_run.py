"""Episodes in the training loop (issue #40): a run of the small tools organism calls the real calculator,
trains on the tokens the model sampled and never on a tool result's (the mask the loss receives is
compared with the stored turns), stores every episode's turns and calls beside its rollout, records the
episode metrics of the catalogue, resumes from a checkpoint exactly, and a one-turn episode trains as
today's single-turn rollout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import polars as pl
import pytest
import torch

from workbench import faults
from workbench.algorithms.losses import POLICY_LOSSES, get_policy_loss
from workbench.engine import resume, run
from workbench.metrics import CATALOGUE, lookup
from workbench.store import open_store
from f32 import assert_f32_close

SEEN_MASKS: list[tuple[torch.Tensor, torch.Tensor]] = []
"""(tokens, loss mask) of every micro-batch the recording loss saw, in order."""


def _recording_loss(logp, old, adv, mask, **kw):
    SEEN_MASKS.append((logp.detach().shape, mask.detach().cpu().clone()))
    return get_policy_loss("ppo_clip")(logp, old, adv, mask, **kw)


@pytest.fixture
def recording_loss():
    """`ppo_clip` that records the mask it receives, registered for one test (other tests read the registry)."""
    SEEN_MASKS.clear()
    POLICY_LOSSES.add("test_recording_ppo_clip", _recording_loss)
    try:
        yield SEEN_MASKS
    finally:
        POLICY_LOSSES.remove("test_recording_ppo_clip")


def _episodes(store_dir, rid) -> tuple[pl.DataFrame, dict]:
    with open_store(str(store_dir)) as st:
        rows = st.rollouts(rid, limit=100_000).sort(["step", "stage", "prompt_id", "idx"])
        keys = [(r["step"], r["stage"], r["prompt_id"], r["idx"]) for r in rows.to_dicts()]
        return rows, st.episodes(rid, keys)


def test_an_episodes_run_calls_the_tool_trains_on_model_tokens_only_and_stores_turns(store_dir, tiny_tools_config,
                                                                                      recording_loss):
    cfg = tiny_tools_config(steps=2, eval__every=2, algorithm__loss="test_recording_ppo_clip",
                            algorithm__micro_batch_size=0, checkpoint__every=0)
    seen: dict[int, dict] = {}
    rid = run(cfg, store=str(store_dir), on_step=lambda s, m: seen.__setitem__(s, m))
    rows, eps = _episodes(store_dir, rid)
    assert rows.height == 64 and len(eps) == 64 and set(rows["shape"]) == {"episodes"}
    # every rollout row is its episode: the response's tokens are the turns' after the prompt, in order
    for r in rows.to_dicts():
        ep = eps[(r["step"], r["stage"], r["prompt_id"], r["idx"])]
        sampled = [tok for t in ep.response_turns if t.role == "assistant" for tok in t.token_ids]
        assert sampled == r["token_ids"] and r["turns"] == len(ep.turns)  # the rollout row: the model's tokens
        assert r["tool_calls"] == len(ep.tool_calls) and r["tool_tokens"] == ep.tool_tokens
        assert r["length"] == ep.model_tokens == len(r["token_entropy"])
        assert r["finish_reason"] in {"stop", "length", "turns", "tool_calls", "model_tokens", "total_tokens"}
        for t in ep.response_turns:
            if t.role == "tool":
                assert t.entropy is None and not any(t.trained())
    calls = [c for ep in eps.values() for c in ep.tool_calls]
    assert calls, "the warm start calls the calculator in half its examples"
    for c in calls:  # the real calculator, in the sandbox: a right result or an error the model read
        if c.error is None:
            assert c.result == str(eval(c.arguments, {"__builtins__": {}}))  # noqa: S307 - digits and * + only
    # the loss received, for each row it trained on, exactly the model's tokens of its stored episode
    # (one micro-batch a step; a row trains when its group's rewards differ)
    signal = rows.group_by(["step", "prompt_id"]).agg(pl.col("reward").n_unique().alias("k")).filter(pl.col("k") > 1)
    trained = rows.join(signal, on=["step", "prompt_id"]).filter(pl.col("used_in_update"))
    steps = sorted(set(trained["step"]))
    assert len(SEEN_MASKS) == len(steps) >= 1
    for step, (shape, mask) in zip(steps, SEEN_MASKS):
        width = shape[1]
        mine = [eps[(r["step"], r["stage"], r["prompt_id"], r["idx"])] for r in trained.filter(pl.col("step") == step)
                .to_dicts()]
        want = sorted(tuple(ep.loss_mask()) + (False,) * (width - len(ep.loss_mask())) for ep in mine)
        assert sorted(tuple(bool(x) for x in row) for row in mask) == want
    assert any(not all(m) for m in (ep.loss_mask() for ep in eps.values()))  # some tool tokens were left out
    # metrics: every episodes/ entry of the catalogue is recorded (the entropy delta where a turn followed a result)
    names = set().union(*(m.keys() for m in seen.values()))
    assert sorted(n for n in names if lookup(n) is None) == []
    followed = any(prev.role == "tool" and t.role == "assistant" and t.token_ids
                   for ep in eps.values() for prev, t in zip(ep.turns, ep.turns[1:]))
    want = {m.name for m in CATALOGUE if m.present == "episodes"} - (set() if followed else
                                                                      {"episodes/entropy_after_tool_delta"})
    assert sorted(want - names) == []
    step_calls = {s: sum(len(ep.tool_calls) for k, ep in eps.items() if k[0] == s) for s in (1, 2)}
    for s in (1, 2):
        assert seen[s]["episodes/tool_calls"] == pytest.approx(step_calls[s] / 32)
        assert "eval/pass1" in seen[2]


def test_a_one_turn_episode_trains_as_a_single_turn_rollout(store_dir, tiny_config):
    """The plain small organism has no `</calc>` token, so every episode is one turn: the run must be
    today's single-turn run, row for row and loss for loss (float32 rounding)."""
    seen = {"independent": {}, "episodes": {}}
    rows = {}
    for shape in seen:
        cfg = tiny_config(steps=2, eval__every=0, eval__at_start=False, checkpoint__every=0, rollout__shape=shape)
        if shape == "episodes":  # the run says no call can end
            with pytest.warns(UserWarning, match="cannot write '</calc>'"):
                rid = run(cfg, store=str(store_dir), on_step=lambda s, m, shape=shape: seen[shape].__setitem__(s, m))
        else:
            rid = run(cfg, store=str(store_dir), on_step=lambda s, m, shape=shape: seen[shape].__setitem__(s, m))
        with open_store(str(store_dir)) as st:
            rows[shape] = st.rollouts(rid, limit=10_000).sort(["step", "prompt_id", "idx"])
    a, b = rows["independent"], rows["episodes"]
    cols = ["step", "prompt_id", "idx", "token_ids", "response", "reward", "finish_reason", "length"]
    assert a.select(cols).to_dicts() == b.select(cols).to_dicts()
    assert set(b["turns"]) == {2} and set(b["tool_calls"]) == {0} and a["turns"].null_count() == a.height
    assert_f32_close(torch.tensor(b["advantage"].to_list()), torch.tensor(a["advantage"].to_list()), terms=8)
    for step in (1, 2):
        x, y = seen["independent"][step], seen["episodes"][step]
        assert x["train/optimizer_steps"] == y["train/optimizer_steps"]
        if "train/loss" in x:
            assert_f32_close(torch.tensor(y["train/loss"]), torch.tensor(x["train/loss"]), terms=256)
            assert_f32_close(torch.tensor(y["train/grad_norm"]), torch.tensor(x["train/grad_norm"]), terms=256)


@pytest.mark.slow
def test_an_episodes_run_killed_mid_episode_resumes_to_the_uninterrupted_run(store_dir, tiny_tools_config):
    """SIGKILL while a tool call's result is on its way back to the model (the `tool` kill point) loses no
    committed step; the run resumed from its checkpoint ends with the rows of a run never interrupted."""
    cfg = tiny_tools_config(steps=4, eval__every=0, eval__at_start=False, checkpoint__every=2)
    whole = run(cfg, store=str(store_dir))
    cut = run(cfg, store=str(store_dir), stop_after=2)
    with open_store(str(store_dir)) as st:
        before = st.rollouts(cut, limit=10_000).sort(["step", "prompt_id", "idx"])
    env = {k: v for k, v in os.environ.items() if k != faults.ENV}
    env[faults.ENV] = "tool:1"  # the first tool call of step 3 kills the process
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "resume", cut, "--store", str(store_dir), "--quiet"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == -signal.SIGKILL, out.stderr[-2000:]
    with open_store(str(store_dir)) as st:  # readable, steps 1-2 as they were, nothing of step 3
        after = st.rollouts(cut, limit=10_000).sort(["step", "prompt_id", "idx"])
        assert after.to_dicts() == before.to_dicts() and set(after["step"]) == {1, 2}
    resume(str(store_dir), cut)
    with open_store(str(store_dir)) as st:
        a = st.rollouts(whole, limit=10_000).sort(["step", "prompt_id", "idx"])
        b = st.rollouts(cut, limit=10_000).sort(["step", "prompt_id", "idx"])
        assert st.run_steps(cut)["step"].to_list() == [1, 2, 3, 4]
        ka = [(r["step"], r["stage"], r["prompt_id"], r["idx"]) for r in a.to_dicts()]
        kb = [(r["step"], r["stage"], r["prompt_id"], r["idx"]) for r in b.to_dicts()]
        ea, eb = st.episodes(whole, ka), st.episodes(cut, kb)
    cols = ["step", "prompt_id", "idx", "token_ids", "response", "reward", "tool_calls", "tool_errors", "finish_reason"]
    assert a.select(cols).to_dicts() == b.select(cols).to_dicts()
    assert [[(t.role, t.token_ids) for t in ea[k].turns] for k in ka] == \
        [[(t.role, t.token_ids) for t in eb[k].turns] for k in kb]


@pytest.mark.parametrize("over, words", [
    ({"tools": {"enabled": ["calculator", "web_search"]}}, ["tools.enabled[1]", "unknown tool 'web_search'"]),
    ({"tools": {"syntax": "xml"}}, ["tools.syntax"]),
    ({"tools": {"max_calls": 65}}, ["tools.max_calls"]),
    ({"tools": {"limits": {"memory_mb": 0}}}, ["tools.limits.memory_mb"]),
    ({"rollout": {"shape": "episodes", "episodes": {"max_turns": 0}}}, ["rollout.episodes.max_turns"]),
    ({"rollout": {"shape": "episodes", "episodes": {"max_model_tokens": 90, "max_total_tokens": 80}}},
     ["rollout.episodes.max_total_tokens"]),
    ({"rollout": {"shape": "episodes"}, "pipeline": {"max_staleness": 1}}, ["synchronous loop only"]),
    ({"rollout": {"shape": "episodes", "backend": "ray"}}, ["runs on rollout.backend = \"hf\" only"]),
])
def test_a_bad_episodes_config_is_refused_at_load_naming_the_field(over, words):
    from workbench.config import RunConfig
    from workbench.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict(over)
    for w in words:
        assert w in str(err.value), str(err.value)


def test_evaluating_episodes_gives_the_same_samples_whatever_the_tools_timing(tools_organism, tiny_tools_config):
    """Evaluation samples episodes from one stream per row (drawn from the evaluation's generator), so a
    tool that answers slower or faster, in another order, never changes a sample."""
    import random
    import time

    from benchmarks.tiny import small_tools_recipe
    from workbench.models.loading import load_model
    from workbench.models.organism import organism_dir
    from workbench.rollout.base import SamplingParams
    from workbench.rollout.hf import HFBackend
    from workbench.rollout.shapes import make_shape

    cfg = tiny_tools_config()
    model, tok = load_model(organism_dir(tools_organism.parent, small_tools_recipe()))
    shape = make_shape(cfg, tok).bind(HFBackend(model, tok))
    prompts = [tok(f"{a}*{b}=")["input_ids"] for a, b in ((12, 34), (56, 78), (9, 87), (65, 43))] * 4
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12)
    real = shape.run_tool

    def slow(text):
        time.sleep(random.random() * 0.02)
        return real(text)

    outs = []
    for runner in (real, slow):
        shape.run_tool = runner
        gen = torch.Generator().manual_seed(5)
        outs.append(shape.generate_flat(prompts, sampling, generator=gen).tokens.tolist())
    shape.close()
    assert outs[0] == outs[1]
