"""Workload profiles (task.profile): levels, answers, the warm start each implies, and the default
recipe's hash staying what it was before profiles existed (cached organisms stay valid)."""

from __future__ import annotations

import pytest

from workbench.errors import ConfigError
from workbench.models.organism import OrganismRecipe
from workbench.tasks.arithmetic import (
    DEFAULT_LEVELS, LONG_LEVELS, SKEWED_LEVELS, ArithmeticTask, ArithmeticTaskConfig, worked_answer,
)


def test_default_profile_is_unchanged():
    cfg = ArithmeticTaskConfig()
    assert cfg.profile == "default" and cfg.levels == DEFAULT_LEVELS and cfg.train_size == 6000
    assert OrganismRecipe().hash() == "e6950deca6a2", "the default organism's cache key must not move"
    assert OrganismRecipe().untaught_levels == ("3*2",) and OrganismRecipe().level_corrupt == ()


def test_profiles_set_levels_pool_and_warm_start():
    skewed = OrganismRecipe(task=ArithmeticTaskConfig(profile="skewed"))
    assert skewed.task.levels == SKEWED_LEVELS and skewed.task.train_size == 1536
    assert skewed.untaught_levels == ("2*2", "3*2")
    assert [skewed.corrupt_share(i) for i in range(1, 5)] == [0.0, 0.0, 0.0, 0.4]
    long = OrganismRecipe(task=ArithmeticTaskConfig(profile="long"))
    assert long.task.levels == LONG_LEVELS and long.untaught_levels == () and long.corrupt_share(3) == 0.4
    # the long profile's batches are ~2.2x wider, so its warm start takes fewer steps (build time)
    assert (long.steps, skewed.steps, OrganismRecipe().steps) == (600, 700, 700)
    assert OrganismRecipe(task=ArithmeticTaskConfig(profile="long"), steps=700).steps == 700
    assert OrganismRecipe(task=ArithmeticTaskConfig(profile="long"), steps=700).hash() != long.hash()
    assert len({skewed.hash(), long.hash(), OrganismRecipe().hash()}) == 3
    # explicit fields win over the profile's
    mine = ArithmeticTaskConfig(profile="skewed", levels=("1+1", "2*2"), train_size=10)
    assert mine.levels == ("1+1", "2*2") and mine.train_size == 10
    assert OrganismRecipe(task=mine, untaught_levels=()).untaught_levels == ()
    with pytest.raises(ConfigError, match="task.profile"):
        ArithmeticTaskConfig(profile="steep")
    with pytest.raises(ConfigError, match="organism.level_corrupt"):
        OrganismRecipe(level_corrupt=(0.1, 0.2))


def test_long_answers_are_worked_steps_and_only_the_final_value_is_judged():
    assert worked_answer("12+34+56+7", "109") == "46+56=102+7=109"
    assert worked_answer("12+34", "46") == "46" and worked_answer("12*3+4", "40") == "40"
    task = ArithmeticTask(ArithmeticTaskConfig(profile="long", train_size=50, eval_per_level=4))
    p = next(p for p in task.eval_prompts() if p.metadata["spec"] == "2+2+2+2")
    worked = task.completion(p.metadata["expr"], p.answer)
    assert worked.count("=") == 2 and worked.endswith("=" + p.answer)
    assert task.verify(worked, p).reward == 1.0
    assert task.verify(p.answer, p).reward == 1.0, "the final value alone is right too"
    assert task.verify(worked[:-1] + str((int(p.answer[-1]) + 1) % 10), p).reward == 0.0
    # the default profile keeps exact match on the whole response
    d = ArithmeticTask(ArithmeticTaskConfig(train_size=10, eval_per_level=2))
    q = d.eval_prompts()[0]
    assert d.completion(q.metadata["expr"], q.answer) == q.answer and d.verify("1=" + q.answer, q).reward == 0.0


def test_a_run_config_profile_reaches_the_organism_recipe():
    from workbench.config import load_config
    from workbench.models.sources import organism_recipe

    def recipe(cfg):
        plain = cfg.to_dict()
        return organism_recipe(plain["model"], plain["task"])

    assert recipe(load_config(None, [])).hash() == OrganismRecipe().hash()
    cfg = load_config(None, ["task.profile=skewed"])
    assert recipe(cfg) == OrganismRecipe(task=ArithmeticTaskConfig(profile="skewed"))
