"""Run configs: defaults, TOML round trip, overrides, and every bad value rejected naming the field."""

import pytest

from workbench.config import RunConfig, apply_overrides, field_docs, load_config
from workbench.config_docs import to_toml
from workbench.config_docs import config_markdown
from workbench.errors import ConfigError


def test_defaults_validate_and_round_trip(tmp_path):
    cfg = RunConfig.from_dict({})
    assert cfg == RunConfig()
    p = tmp_path / "c.toml"
    p.write_text(to_toml(cfg))
    assert load_config(p) == cfg
    assert RunConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("path", ["configs/organism.toml", "configs/gsm8k_local_model.toml"])
def test_shipped_configs_load_and_round_trip(path, tmp_path):
    cfg = load_config(path)
    p = tmp_path / "c.toml"
    p.write_text(to_toml(cfg))
    assert load_config(p) == cfg


def test_overrides_parse_toml_values():
    cfg = load_config(None, ["optim.lr=5e-5", "steps=7", "allocator.params.n=4", 'name="x y"', "eval.greedy=false"])
    assert cfg.optim.lr == 5e-5 and cfg.steps == 7 and cfg.allocator.params == {"n": 4}
    assert cfg.name == "x y" and cfg.eval.greedy is False
    assert apply_overrides({}, ["a.b=word"]) == {"a": {"b": "word"}}


@pytest.mark.parametrize(
    "override, field",
    [
        ("optim.lr=0", "optim.lr"),
        ("optim.lr=-1e-4", "optim.lr"),
        ('optim.lr="fast"', "optim.lr"),
        ("optim.betas=[0.9]", "optim.betas"),
        ('optim.schedule="step"', "optim.schedule"),
        ("sampling.temperature=0", "sampling.temperature"),
        ("sampling.top_p=1.5", "sampling.top_p"),
        ("sampling.max_new_tokens=0", "sampling.max_new_tokens"),
        ("allocator.budget=0", "allocator.budget"),
        ('allocator.budget_kind="seconds"', "allocator.budget_kind"),
        ('allocator.name="nope"', "allocator.name"),
        ("allocator.params.n=0", "allocator.params"),
        ("allocator.params.bogus=1", "allocator.params"),
        ('algorithm.advantage="ppo"', "algorithm.advantage"),
        ('algorithm.loss="nope"', "algorithm.loss"),
        ('algorithm.aggregation="median"', "algorithm.aggregation"),
        ("algorithm.clip_low=1.5", "algorithm.clip_low"),
        ("algorithm.kl_coef=-1", "algorithm.kl_coef"),
        ("algorithm.updates_per_step=0", "algorithm.updates_per_step"),
        ("eval.samples=0", "eval.samples"),
        ("eval.every=-1", "eval.every"),
        ("checkpoint.keep=0", "checkpoint.keep"),
        ("steps=1.5", "steps"),
        ("steps=true", "steps"),
        ("optim.warmup=3", "optim.warmup"),
        ("colour=1", "colour"),
        ('task.kind="chess"', "task.kind"),
        ("task.train_size=0", "task.train_size"),
        ('model.device="tpu"', "model.device"),
        ('model.path=""', "model.path"),
        ("store.max_queued_steps=0", "store.max_queued_steps"),
        ('store.max_queued_steps="many"', "store.max_queued_steps"),
    ],
)
def test_bad_values_rejected_naming_the_field(override, field):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert field in str(err.value)


def test_unknown_key_lists_allowed(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[optim]\nlearning_rate = 1e-4\n")
    with pytest.raises(ConfigError, match=r"optim.learning_rate: unknown field \(allowed in optim: lr, "):
        load_config(p)


def test_bad_toml_and_missing_file(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("steps = = 3\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(p)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml")


def test_every_field_documented():
    from dataclasses import fields, is_dataclass

    cfg = RunConfig()
    for f in fields(RunConfig):
        assert field_docs(RunConfig).get(f.name), f.name
        sub = getattr(cfg, f.name)
        if is_dataclass(sub):
            docs = field_docs(type(sub))
            for g in fields(sub):
                assert docs.get(g.name), f"{f.name}.{g.name} has no docstring"


def test_docs_configs_md_is_current():
    """Every engine config field appears in docs/configs.md with its default and its docstring
    (regenerate with `workbench config show --markdown > docs/configs.md`)."""
    from dataclasses import fields, is_dataclass
    from pathlib import Path

    text = Path("docs/configs.md").read_text()
    current = config_markdown()
    cfg = RunConfig()
    for f in fields(RunConfig):
        sub = getattr(cfg, f.name)
        if not is_dataclass(sub):
            continue
        for g in fields(sub):
            line = next(x for x in current.splitlines() if x.startswith(f"| `{g.name}` |") and
                        field_docs(type(sub))[g.name][:40].replace("|", "\\|") in x)
            assert line in text, f"docs/configs.md is stale for {f.name}.{g.name}: regenerate it"
