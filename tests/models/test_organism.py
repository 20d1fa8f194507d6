"""The organism on a small recipe (seconds of CPU): cached build, determinism, a loadable model
directory, and a warm start whose pass rates spread (the full recipe is checked by
`workbench organism report`)."""

from __future__ import annotations

import json
import random

import pytest

from workbench.errors import ConfigError
from workbench.models.organism import OrganismRecipe, ensure_organism, organism_dir, read_meta, small_recipe
from workbench.models.report import evaluate_organism, pass_at_k, weights_digest
from workbench.models.warmstart import IGNORE, corrupt_answer, make_examples
from workbench.tasks import ArithmeticTask, ArithmeticTaskConfig

RECIPE = small_recipe()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    return store, ensure_organism(store, RECIPE)


def test_recipe_hash_names_the_cache_and_changes_with_fields():
    assert OrganismRecipe().hash() == OrganismRecipe().hash()
    assert OrganismRecipe(corrupt_frac=0.3).hash() != OrganismRecipe().hash()
    assert organism_dir("s", RECIPE).name == f"organism-{RECIPE.hash()}"
    again = OrganismRecipe.from_dict(json.loads(json.dumps(RECIPE.to_dict())))
    assert again == RECIPE and again.hash() == RECIPE.hash()


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"arch": "gpt9"}, "organism.arch"),
        ({"corrupt_frac": 1.0}, "organism.corrupt_frac"),
        ({"heads": 3}, "organism.heads"),
        ({"level_weights": (1.0,)}, "organism.level_weights"),
        ({"alphabet": "0123456789+="}, "organism.alphabet"),
        ({"task": ArithmeticTaskConfig(levels=("3*2",))}, "organism.untaught_levels"),
    ],
)
def test_bad_recipe_names_the_field(kw, field):
    with pytest.raises(ConfigError, match=field):
        OrganismRecipe(**kw)
    with pytest.raises(ConfigError, match="unknown field"):
        OrganismRecipe.from_dict({"hiden_size": 3})


def test_corrupt_answer_moves_one_digit_by_one():
    rng = random.Random(0)
    for answer in ["0", "9", "10", "19", "123", "9999", "-45"]:
        for _ in range(50):
            bad = corrupt_answer(answer, rng)
            diffs = [(a, b) for a, b in zip(answer, bad) if a != b]
            assert len(bad) == len(answer) and len(diffs) == 1
            assert abs(int(diffs[0][0]) - int(diffs[0][1])) == 1
            assert not (len(bad.lstrip("-")) > 1 and bad.lstrip("-")[0] == "0")


def test_examples_exclude_eval_and_label_the_answer_only():
    recipe = small_recipe(steps=20, corrupt_frac=0.5)
    task = ArithmeticTask(recipe.task)
    ids, labels = make_examples(recipe, task.eval_exprs)
    assert ids.shape[0] == 20 * recipe.batch_size
    from workbench.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    texts = tok.batch_decode(ids, skip_special_tokens=True)
    exprs = [t.split("=")[0] for t in texts]
    assert not set(exprs) & task.eval_exprs
    wrong = sum(str(eval(e)) != t.split("=")[1] for e, t in zip(exprs, texts))  # noqa: S307
    assert 0.4 < wrong / len(texts) < 0.6
    row = labels[0][labels[0] != IGNORE].tolist()
    answer = texts[0].split("=")[1]
    assert tok.decode(row[:-1]) == answer and row[-1] == tok.eos_token_id


def test_pass_at_k():
    assert pass_at_k(16, 0, 8) == 0.0 and pass_at_k(16, 16, 1) == 1.0
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25)
    assert pass_at_k(16, 1, 8) == pytest.approx(0.5)


def test_build_is_cached_loadable_and_deterministic(built, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    store, path = built
    meta = read_meta(path)
    assert meta["hash"] == RECIPE.hash() and meta["final_loss"] < meta["first_loss"]
    # the recipe hash pins the recipe; organism.json also pins the numbers and what made them
    assert meta["weights_sha256"] == weights_digest(path) and len(meta["weights_sha256"]) == 64
    assert {"torch", "transformers", "python", "machine", "cpu"} <= set(meta["built_with"])
    assert ensure_organism(store, RECIPE) == path  # cached: no rebuild
    assert read_meta(path)["build_s"] == meta["build_s"]
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert model.config.model_type == "llama" and len(tok) == model.config.vocab_size
    again = ensure_organism(tmp_path / "other-store", RECIPE)
    assert weights_digest(again) == weights_digest(path)
    assert weights_digest(again) != weights_digest_of_untrained(tmp_path)


def weights_digest_of_untrained(tmp_path):
    """Digest of the same recipe with no training steps that change weights (lr ~ 0)."""
    return weights_digest(ensure_organism(tmp_path / "untrained", small_recipe(steps=1, warmup_steps=1, lr=1e-12)))


def test_warm_start_spreads(built):
    _, path = built
    report = evaluate_organism(path, RECIPE, samples=16)
    assert report["eval_prompts"] == len(ArithmeticTask(RECIPE.task).eval_prompts())
    # measured on this recipe: frac_intermediate 0.35, pass8 - pass1 0.19 (the full recipe: dev/LOG.md)
    assert report["frac_intermediate"] >= 0.25
    assert report["pass8"] - report["pass1"] >= 0.1
    levels = report["pass1_by_level"]
    assert levels["1"] > levels[str(len(RECIPE.task.levels))]  # easier levels pass more often


def _cli(args):
    from typer.testing import CliRunner

    from workbench.cli import app

    return CliRunner().invoke(app, args)


def test_cli_build_uses_the_cache(built, tmp_path):
    store, path = built
    recipe_file = tmp_path / "recipe.json"
    recipe_file.write_text(json.dumps(RECIPE.to_dict()))
    result = _cli(["organism", "build", "--store", str(store), "--recipe", str(recipe_file), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["path"] == str(path) and out["hash"] == RECIPE.hash()


def test_cli_bad_recipe_is_one_clear_error(tmp_path):
    from workbench.errors import ConfigError

    recipe_file = tmp_path / "recipe.json"
    recipe_file.write_text(json.dumps({"corrupt_frac": 2}))
    result = _cli(["organism", "build", "--store", str(tmp_path), "--recipe", str(recipe_file)])
    assert isinstance(result.exception, ConfigError) and "organism.corrupt_frac" in str(result.exception)
