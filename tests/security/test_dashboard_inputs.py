"""Hostile input through every way the dashboard takes input (R4): the launch form (config path,
overrides, run name), the rollouts filters (text and numbers), and the URL's query parameters on every
page. Each is refused with a message in the page or shown as inert text; nothing is launched, written
or run, and no page raises."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")
import synth  # noqa: E402
from apptest import goto, new_app, open_app  # noqa: E402
from workbench.control.launch import check_config_path, check_overrides  # noqa: E402
from workbench.errors import ControlError  # noqa: E402
from workbench.store import open_store  # noqa: E402

PAGES = ["runs", "live", "rollouts", "prompt", "allocation", "compare"]
HOSTILE = ["'; DROP TABLE runs; --", "<script>alert(1)</script>", "../../etc/passwd", "%s%s%n", "🙂" * 50]
# a NUL byte in a bound value broke DuckLake's own file-pruning query; the reader now matches nothing
NUL = "x\x00y"
BAD_OVERRIDES = [
    ("foo=1", "unknown field 'foo'"),
    ("__class__.__init__=1", "unknown field"),
    ("../../etc/passwd=1", "is not a field name"),
    ("optim.lr", "expected field=value"),
    ("task.verifier=\"os:system\"", "task.verifier: a user verifier"),
    ("model.path=1\nfoo.bar=2", "unknown field 'foo.bar'"),
    ("optim.lr=" + "9" * 3000, "characters long"),
    ("optim.lr=-1", "optim.lr"),  # a known field with a bad value: the config's own check
]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    path = tmp_path_factory.mktemp("dash-sec") / "store"
    ids = synth.fill(path, steps=3)
    return path, ids


@pytest.fixture
def app(lake, monkeypatch):
    return open_app(lake[0], monkeypatch)


def _counts(path):
    with open_store(path, read_only=True) as store:
        return {t: store.sql(f"SELECT count(*) AS n FROM {t}")["n"][0] for t in ("runs", "controls", "rollouts", "steps")}


@pytest.mark.parametrize("text, expected", BAD_OVERRIDES)
def test_launch_form_refuses_bad_overrides(app, lake, text, expected):
    path, _ = lake
    before = _counts(path)
    app.text_area(key="runs_overrides").set_value(text)
    next(b for b in app.button if b.label == "Validate and launch").click().run()
    assert not app.exception
    errors = [e.value for e in app.error]
    assert any(expected in e for e in errors), errors
    assert _counts(path) == before
    assert not (path / "runs").exists()  # no run directory, no process


@pytest.mark.parametrize("name", ["a" * 500, "bad\x1b[31mname", "line\nbreak"])
def test_launch_form_refuses_bad_run_names(app, lake, name):
    path, _ = lake
    before = _counts(path)
    app.text_input(key="runs_name").set_value(name)
    app.text_area(key="runs_overrides").set_value("steps=1")
    next(b for b in app.button if b.label == "Validate and launch").click().run()
    assert any("run name" in e.value for e in app.error), [e.value for e in app.error]
    assert _counts(path) == before


def test_config_path_must_be_inside_the_configs_directory(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "ok.toml").write_text("steps = 1\n")
    outside = tmp_path / "outside.toml"
    outside.write_text("steps = 1\n")
    (configs / "link.toml").symlink_to(outside)
    assert check_config_path(configs / "ok.toml", [configs]) == (configs / "ok.toml").resolve()
    for bad in (configs / ".." / "outside.toml", outside, configs / "link.toml", "/etc/passwd",
                configs / "missing.toml", configs, "configs/\x00.toml"):
        with pytest.raises(ControlError, match="launch: config"):
            check_config_path(bad, [configs])


def test_overrides_only_known_fields():
    assert check_overrides([" optim.lr = 5e-5 ", "allocator.params.n=4", "task.path=\"d.jsonl\"",
                            "model.organism.steps=10", "task.verifier=\"exact\""]) == [
        "optim.lr=5e-5", "allocator.params.n=4", "task.path=\"d.jsonl\"", "model.organism.steps=10",
        "task.verifier=\"exact\""]
    with pytest.raises(ControlError, match="at most 64"):
        check_overrides(["steps=1"] * 65)


@pytest.mark.parametrize("value", [*HOSTILE, NUL])
def test_rollouts_text_filters_are_inert(app, lake, value):
    path, ids = lake
    before = _counts(path)
    at = app.switch_page("app_pages/rollouts.py").run()
    at.selectbox(key="rollouts_run").set_value(ids[0]).run()
    at.text_input(key="rollouts_prompt").set_value(value).run()
    assert not at.exception
    assert at.text[0].value.startswith("0 rollouts match")
    at.text_input(key="rollouts_prompt").set_value("").run()
    at.selectbox(key="rollouts_verdict").set_value("other…").run()
    at.text_input(key="rollouts_verdict_other").set_value(value).run()
    assert not at.exception
    assert at.text[0].value.startswith("0 rollouts match")
    assert "<script>" not in "".join(h.proto.body for h in at.get("html"))
    assert _counts(path) == before


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1e308, 1e308])
def test_rollouts_number_filters_take_extreme_values(app, lake, value):
    path, ids = lake
    at = app.switch_page("app_pages/rollouts.py").run()
    at.selectbox(key="rollouts_run").set_value(ids[0]).run()
    for key in ("rollouts_reward_min", "rollouts_reward_max", "rollouts_entropy_min", "rollouts_entropy_max",
                "rollouts_length_min", "rollouts_length_max"):
        if "length" in key:  # an integer input with minimum 0: the browser sends only such integers
            if value != value or abs(value) == float("inf") or value < 0:
                continue
            at.number_input(key=key).set_value(int(value)).run()
        else:
            at.number_input(key=key).set_value(value).run()
        assert not at.exception, (key, [e.value for e in at.exception])
        assert at.text[0].value.split(" rollouts match")[0].isdigit()
        at.number_input(key=key).set_value(None).run()


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_hostile_query_parameters_on_every_page(lake, monkeypatch, page):
    """The URL is input too: `?run=...&prompt=...&refresh=...` with hostile values."""
    path, _ = lake
    before = _counts(path)
    probe = goto(open_app(path, monkeypatch, query={"run": lake[1][1]}), "rollouts")  # the parameters reach pages
    assert probe.selectbox(key="rollouts_run").value == lake[1][1]
    for value in [HOSTILE[0], HOSTILE[1], "1e999"]:
        at = new_app(query={"run": value, "prompt": value, "refresh": value})
        at.run()
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, (page, value, [e.value for e in at.exception])
    assert _counts(path) == before
