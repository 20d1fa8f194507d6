"""Live logging from real TRL (GRPOTrainer 1.16) on the small organism into a real store: every
completion stored exactly once, each step's mean reward equal to the `reward` TRL logged, the same
completions as TRL's own `log_completions` files imported, generation batches that serve several
optimizer steps, training unchanged by the logger, a failed run, `stop` from the dashboard, the
version gate, and the committed TRL fixture."""

from __future__ import annotations

import contextlib
import io
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from f32 import f32_atol

pytest.importorskip("trl", reason="the trl extra is not installed")

from trl import GRPOTrainer  # noqa: E402

from workbench.errors import WorkbenchError  # noqa: E402
from workbench.integrations import trl as wtrl  # noqa: E402
from workbench.store import open_store  # noqa: E402

PROMPTS, GENERATIONS = 8, 4


@pytest.fixture(scope="module")
def organism():
    """The small test organism (cached by recipe hash in the system's temporary directory) and its
    training prompts as a datasets.Dataset with `prompt` and `answer` columns."""
    from datasets import Dataset

    from workbench.models.organism import ensure_organism, small_recipe
    from workbench.tasks import ArithmeticTask

    recipe = small_recipe()
    path = ensure_organism(Path(tempfile.gettempdir()) / "workbench-test-organisms", recipe)
    prompts = ArithmeticTask(recipe.task).train_prompts()
    return path, Dataset.from_list([{"prompt": p.text, "answer": p.answer} for p in prompts])


def correct(prompts, completions, answer, **_):  # noqa: ANN001
    from workbench.tasks import verify

    return [verify(c, a, method="exact").reward for c, a in zip(completions, answer)]


def short(prompts, completions, completion_ids, **_):  # noqa: ANN001
    """A second reward with spread (shorter is better), so groups carry signal on a weak organism."""
    return [1.0 / len(ids) for ids in completion_ids]


def make_trainer(organism, tmp_path, cls=None, *, steps=3, reward_funcs=None, **over):
    import torch
    from trl import GRPOConfig

    from workbench.models import load_model

    path, data = organism
    model, tokenizer = load_model(str(path))
    args = dict(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=PROMPTS * GENERATIONS,
        num_generations=GENERATIONS, max_completion_length=6, temperature=1.0, top_k=0, top_p=1.0, beta=0.0,
        loss_type="dapo", scale_rewards="group", learning_rate=1e-4, max_steps=steps, logging_steps=1,
        report_to="none", save_strategy="no", use_cpu=True, bf16=False, use_vllm=False, num_iterations=1,
        gradient_accumulation_steps=1, dataloader_num_workers=0, seed=0, disable_dropout=True, disable_tqdm=True,
        reward_weights=[1.0, 0.5],
    )
    args.update(over)
    torch.use_deterministic_algorithms(False)
    cls = cls or wtrl.WorkbenchGRPOTrainer
    logger = dict(store=tmp_path / "store", run_name="trl-live") if issubclass(cls, wtrl._WorkbenchMixin) else {}
    return cls(model=model, reward_funcs=reward_funcs or [correct, short], args=GRPOConfig(**args),
               train_dataset=data, processing_class=tokenizer, **logger)


def train(trainer):
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.train()


def train_logs(trainer) -> dict[int, dict]:
    return {h["step"]: h for h in trainer.state.log_history if "reward" in h}


def test_every_completion_once_and_rewards_match_trl(organism, tmp_path):
    trainer = make_trainer(organism, tmp_path, steps=3, log_completions=True, num_completions_to_print=0)
    train(trainer)
    run_id = trainer.workbench_run_id
    logged = train_logs(trainer)
    assert sorted(logged) == [1, 2, 3]
    with open_store(tmp_path / "store", read_only=True) as store:
        run = store.run(run_id)
        assert run["source"] == "trl" and run["status"] == "finished"
        assert run["config"]["reward_funcs"] == ["correct", "short"]
        steps = store.run_steps(run_id).sort("step")
        rows = store.sql("SELECT * FROM rollouts WHERE run_id = ? ORDER BY step, prompt_id, idx", [run_id])
        prompts = store.prompts(run_id)
        allocs = store.allocations(run_id)
    assert steps["step"].to_list() == [1, 2, 3]
    # every completion exactly once: 8 prompts x 4 generations per step, unique (step, prompt, idx)
    assert rows.height == 3 * PROMPTS * GENERATIONS
    assert rows.select("step", "prompt_id", "idx").unique().height == rows.height
    assert sorted(rows.group_by("step").len()["len"].to_list()) == [32, 32, 32]
    assert set(rows["idx"].to_list()) == set(range(GENERATIONS))
    assert set(prompts["prompt_id"].to_list()) == set(rows["prompt_id"].to_list())
    assert all(wtrl.prompt_id(t) == p for t, p in zip(prompts["text"], prompts["prompt_id"]))
    assert prompts["answer"].null_count() == 0  # the dataset's `answer` column
    assert allocs["granted"].sum() == rows.height
    for step in (1, 2, 3):
        mine = rows.filter(rows["step"] == step)
        trl_reward = logged[step]["reward"]
        tol = f32_atol(max(1.0, abs(trl_reward)), PROMPTS * GENERATIONS)
        assert float(mine["reward"].mean()) == pytest.approx(trl_reward, abs=tol)
        srow = steps.filter(steps["step"] == step).row(0, named=True)
        assert srow["reward_mean"] == pytest.approx(trl_reward, abs=tol)
        assert srow["rollouts"] == PROMPTS * GENERATIONS and srow["prompts"] == PROMPTS
        assert srow["loss"] == pytest.approx(logged[step]["loss"], abs=1e-6)
        assert srow["metrics"]["trl/reward"] == pytest.approx(trl_reward, rel=1e-6)
        # TRL's group-normalised advantages: each group's sum is ~0
        sums = mine.group_by("prompt_id").agg(s=pl.col("advantage").sum())["s"].to_numpy()
        assert np.abs(sums).max() < 1e-3
    # text, tokens, per-token entropy and behaviour log-probs are there and consistent
    assert (rows["length"] == rows["token_ids"].list.len()).all()
    assert (rows["token_entropy"].list.len() == rows["length"]).all()
    assert (rows["token_logprobs"].list.len() == rows["length"]).all()
    lp = rows["token_logprobs"].list.sum().to_numpy()
    assert np.allclose(lp, rows["logprob_sum"].to_numpy(), atol=1e-4)
    assert (rows["logprob_sum"] <= 0).all() and (rows["entropy_mean"] >= 0).all()
    assert rows["response"].null_count() == 0 and (rows["used_in_update"]).all()
    assert not rows["off_policy"].any()
    # the same completions as TRL's own log_completions files, imported (workbench import trl)
    from workbench.integrations import import_path

    with open_store(tmp_path / "store") as store:
        report = import_path(store, "trl", tmp_path / "out" / "completions", name="imported",
                             options={"reward_weights": {"correct": 1.0, "short": 0.5}})
        imported = store.sql("SELECT step, prompt_id, idx, response, reward, advantage FROM rollouts "
                             "WHERE run_id = ? ORDER BY step, prompt_id, idx", [report["run_id"]])
    live = rows.select("step", "prompt_id", "idx", "response", "reward", "advantage")
    assert imported.select("step", "prompt_id", "idx", "response").equals(live.select(imported.columns[:4]))
    for col in ("reward", "advantage"):
        np.testing.assert_allclose(imported[col].to_numpy(), live[col].to_numpy(), rtol=0, atol=f32_atol(2.0, 1))
    # the steps' entropy is the token mean of the stored per-token entropies; TRL's own is kept
    for step in (1, 2, 3):
        ent = np.concatenate(rows.filter(rows["step"] == step)["token_entropy"].to_list())
        srow = steps.filter(steps["step"] == step).row(0, named=True)
        assert srow["entropy_mean"] == pytest.approx(float(ent.mean()), rel=1e-5)
        assert srow["entropy_mean"] == pytest.approx(logged[step]["entropy"], rel=1e-3)


@pytest.mark.parametrize("over, rollout_steps, off_policy", [
    # one generation of 16 prompts x 4 serves two optimizer steps of two micro-batches each: half its
    # completions enter the update after the policy moved (TRL computes old log-probs for them)
    (dict(per_device_train_batch_size=16, gradient_accumulation_steps=2, steps_per_generation=4), [1, 3], 32),
    # each generation is used for two optimizer steps (num_iterations=2), written once
    (dict(num_iterations=2), [1, 3], 0),
], ids=["steps_per_generation", "num_iterations"])
def test_generation_serving_several_steps_is_written_once(organism, tmp_path, over, rollout_steps, off_policy):
    trainer = make_trainer(organism, tmp_path, wtrl.with_workbench(_UserTrainer), steps=4, **over)
    assert type(trainer).__name__ == "Workbench_UserTrainer" and isinstance(trainer, _UserTrainer)
    train(trainer)
    assert trainer.user_hook_calls > 0  # the user's own override still runs
    run_id = trainer.workbench_run_id
    logged = train_logs(trainer)
    with open_store(tmp_path / "store", read_only=True) as store:
        steps = store.run_steps(run_id).sort("step")
        rows = store.sql("SELECT * FROM rollouts WHERE run_id = ?", [run_id])
    assert steps["step"].to_list() == [1, 2, 3, 4]
    assert sorted(set(rows["step"].to_list())) == rollout_steps == sorted(logged)
    per_gen = rows.height // len(rollout_steps)
    assert rows.select("step", "prompt_id", "idx").unique().height == rows.height
    assert int(rows["off_policy"].sum()) == off_policy * len(rollout_steps)
    assert rows["token_logprobs"].null_count() == 0 and rows["token_entropy"].null_count() == 0
    for step in rollout_steps:
        mine = rows.filter(pl.col("step") == step)
        assert mine.height == per_gen
        assert float(mine["reward"].mean()) == pytest.approx(logged[step]["reward"],
                                                            abs=f32_atol(1.0, per_gen))
        assert set(mine["policy_version"].to_list()) == {step - 1}
    empty = steps.filter(~pl.col("step").is_in(rollout_steps))
    assert empty["reward_mean"].null_count() == empty.height and (empty["loss"].is_not_null()).all()


class _UserTrainer(GRPOTrainer):
    """A user's own subclass with an override of its own."""

    user_hook_calls = 0

    def _calculate_rewards(self, *args, **kwargs):
        type(self).user_hook_calls += 1
        return super()._calculate_rewards(*args, **kwargs)


def test_logger_changes_nothing_in_training(organism, tmp_path):
    """Same seed, with and without the logger: TRL logs the same rewards, losses and entropies."""
    ours = make_trainer(organism, tmp_path / "a", steps=2)
    train(ours)
    bare = make_trainer(organism, tmp_path / "b", GRPOTrainer, steps=2)
    train(bare)
    ours, theirs = train_logs(ours), train_logs(bare)
    for step in (1, 2):
        for key in ("reward", "loss", "entropy", "reward_std"):
            assert ours[step][key] == theirs[step][key], (step, key)


def test_failure_marks_the_run_failed_and_keeps_finished_steps(organism, tmp_path):
    calls = {"n": 0}

    def flaky(prompts, completions, **_):  # noqa: ANN001
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("reward server went away")
        return [0.0] * len(completions)

    trainer = make_trainer(organism, tmp_path, steps=3, reward_funcs=[correct, flaky])
    with pytest.raises(RuntimeError, match="reward server went away"):
        train(trainer)
    with open_store(tmp_path / "store", read_only=True) as store:
        run = store.run(trainer.workbench_run_id)
        steps = store.run_steps(trainer.workbench_run_id)
        n = store.count_rollouts(trainer.workbench_run_id)
    assert run["status"] == "failed" and "RuntimeError: reward server went away" in run["error"]
    assert steps["step"].to_list() == [1] and n == PROMPTS * GENERATIONS


def test_stop_from_the_dashboard_stops_trl_and_other_commands_are_rejected(organism, tmp_path):
    from workbench import control

    box: dict = {}

    def issue_controls(prompts, completions, **_):  # noqa: ANN001
        """At the first scoring, queue pause and stop as the dashboard would (another Store object), then
        wait for the writer's thread to take the stop: a loaded machine's commits can otherwise lag behind the
        organism's eight quick steps, and the run would finish before any poll saw the stop."""
        if "stop" not in box:
            with open_store(tmp_path / "store") as other:
                box["pause"] = control.pause(other, box["trainer"].workbench_run_id)
                box["stop"] = control.stop(other, box["trainer"].workbench_run_id)
            deadline = time.monotonic() + 60
            while not box["trainer"]._wb_writer.stop_requested and time.monotonic() < deadline:
                time.sleep(0.05)
        return [0.0] * len(completions)

    trainer = make_trainer(organism, tmp_path, steps=8, reward_funcs=[correct, issue_controls])
    trainer._wb_heartbeat_s = 0.1  # poll controls often: the stop lands within a step or two
    box["trainer"] = trainer
    train(trainer)
    with open_store(tmp_path / "store", read_only=True) as store:
        run = store.run(trainer.workbench_run_id)
        steps = store.run_steps(trainer.workbench_run_id)["step"].to_list()
        controls = {r["control_id"]: r for r in store.controls(trainer.workbench_run_id).to_dicts()}
    assert run["status"] == "stopped", (run, controls, steps)
    assert 1 <= len(steps) < 8 and trainer.state.global_step == len(steps)
    assert controls[box["stop"]]["status"] == "applied"
    assert controls[box["pause"]]["status"] == "rejected"
    assert "applies only stop" in controls[box["pause"]]["reason"]


def test_constructor_refuses_an_untested_trl(organism, tmp_path, monkeypatch):
    import trl

    monkeypatch.setattr(trl, "__version__", "2.0.0")
    with pytest.raises(WorkbenchError, match=r"TRL 2\.0\.0 is installed"):
        make_trainer(organism, tmp_path)
    assert not (tmp_path / "store").exists()


def test_version_gate_names_installed_and_tested():
    assert wtrl.check_trl_version("1.16.3") == "1.16.3"
    with pytest.raises(WorkbenchError, match=r"tested with TRL 1\.16\.x; TRL 0\.19\.1 is installed"):
        wtrl.check_trl_version("0.19.1")


def test_with_workbench_refuses_a_non_grpo_class():
    with pytest.raises(WorkbenchError, match="not a subclass of trl.GRPOTrainer"):
        wtrl.with_workbench(dict)


def test_fixture_is_what_trl_wrote():
    """The committed fixture (tests/fixtures/trl/make.py): 3 steps of 8 prompts x 4 completions, TRL's
    columns, and advantages that follow from the reward columns by TRL's group normalisation
    (Σ weight x reward, minus the group mean, over the group's unbiased std + 1e-4)."""
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "trl" / "completions"
    files = sorted(folder.glob("completions_*.parquet"))
    assert [f.name for f in files] == [f"completions_{s:05d}.parquet" for s in (1, 2, 3)]
    for step, f in enumerate(files, 1):
        frame = pl.read_parquet(f)
        assert frame.columns == ["step", "prompt", "completion", "correct", "digits_only", "answer", "advantage"]
        assert frame.height == PROMPTS * GENERATIONS and set(frame["step"].to_list()) == {step}
        groups = frame["prompt"].to_numpy().reshape(PROMPTS, GENERATIONS)
        assert (groups == groups[:, :1]).all()  # num_generations consecutive rows per prompt
        r = (frame["correct"] + 0.5 * frame["digits_only"]).to_numpy().reshape(PROMPTS, GENERATIONS)
        adv = (r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-4)
        np.testing.assert_allclose(frame["advantage"].to_numpy(), adv.ravel(), rtol=0, atol=f32_atol(10.0, 4))
