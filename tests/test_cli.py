"""The command's frame: version, help on every group, and the light import."""

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from workbench import __version__
from workbench.cli import app

runner = CliRunner()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"workbench {__version__}"


def _groups():
    import typer.main

    click_app = typer.main.get_command(app)
    return [name for name, cmd in click_app.commands.items() if hasattr(cmd, "commands")]


def test_help_lists_groups():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for group in _groups():
        assert group in result.output


@pytest.mark.parametrize("group", _groups())
def test_every_group_has_help(group):
    import typer.main

    cmd = typer.main.get_command(app).commands[group]
    assert cmd.help, f"command group {group!r} has no help text"
    result = runner.invoke(app, [group, "--help"])
    assert result.exit_code == 0, result.output
    for sub, subcmd in cmd.commands.items():
        assert (subcmd.help or "").strip(), f"`workbench {group} {sub}` has no help text"


def test_import_workbench_is_light():
    code = (
        "import sys, workbench, workbench.cli\n"
        "bad = [m for m in ('streamlit', 'torch', 'duckdb', 'transformers') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing workbench pulled in: {out.stdout.strip()}"


def test_resume_of_an_unknown_run_says_so_before_any_progress_bar(tmp_path):
    from workbench.store import open_store

    open_store(tmp_path / "store").close()
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "resume", "NOSUCH", "--store",
                          str(tmp_path / "store")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and out.stdout == "", out.stdout
    assert out.stderr.startswith("error: unknown run 'NOSUCH'") and out.stderr.count("\n") == 1, out.stderr


def test_bench_is_the_benchmarks_packages_group_found_by_its_entry_point():
    """The library never names the benchmarks package: `workbench bench` and `workbench allocators
    profile` come from the entry points of group `workbench.commands` (pyproject.toml)."""
    import importlib.metadata
    import inspect

    import typer.main

    import benchmarks.cli
    from benchmarks.commands.allocators import profile_cmd

    names = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="workbench.commands")}
    assert names == {"bench": "benchmarks.cli:app", "allocators.profile": "benchmarks.commands.allocators:profile_cmd"}
    groups = {info.name: info.typer_instance for info in app.registered_groups}
    assert groups["bench"] is benchmarks.cli.app
    profile = typer.main.get_command(app).commands["allocators"].commands["profile"]
    assert inspect.unwrap(profile.callback) is profile_cmd  # Typer wraps the function it is given


@pytest.mark.parametrize("args, words", [(["bench"], "bench"), (["bench", "store", "--json"], "bench"),
                                         (["allocators", "profile", "skewed"], "allocators profile")])
def test_without_the_benchmarks_package_its_commands_say_so_in_one_line(args, words):
    code = ("import sys; sys.modules['benchmarks'] = None  # the package cannot be imported\n"
            f"sys.argv = ['workbench', *{args!r}]\n"
            "from workbench.cli import main; main()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and out.stdout == "", out.stdout
    assert out.stderr == (f"error: `workbench {words}` comes with the benchmarks package, which is not installed "
                          "(pip install -e . in the repository installs it with the workbench)\n"), out.stderr


def test_an_entry_point_into_a_group_the_library_lacks_is_refused():
    import typer as typer_

    from workbench.commands import plugins
    from workbench.errors import WorkbenchError

    with pytest.raises(WorkbenchError, match=r"'nosuch\.cmd': `workbench nosuch` is not a command group"):
        plugins.add_commands(typer_.Typer(), {"nosuch.cmd": lambda: None})
