"""The Compare prompts page through Streamlit's AppTest on a store filled through the writer API (two of
our runs and an imported one whose prompts match by text): the table holds the analysis frame's rows and
numbers, its filters and sort act, the side-by-side view shows each run's rollouts of the chosen
prompt, and the before/after mode compares one run at two steps. Plus the page's pure helpers."""

from __future__ import annotations

import polars as pl
import pytest

pytest.importorskip("streamlit")
import synth  # noqa: E402
from apptest import goto, open_app  # noqa: E402
from app import compare_view  # noqa: E402
from workbench.analysis import compare_runs  # noqa: E402
from workbench.store import open_store  # noqa: E402

PAGE = "compare_prompts"


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    path = tmp_path_factory.mktemp("compare-prompts") / "store"
    ids = synth.fill(path, steps=6)
    imported = synth.fill_imported(path, steps=5)
    return path, ids, imported


@pytest.fixture
def at(lake, monkeypatch):
    return goto(open_app(lake[0], monkeypatch, timeout=120), PAGE)


def _table(at):
    return next(d.value for d in at.dataframe if "prompt" in d.value.columns)


def test_table_shows_the_analysis_frame(at, lake):
    path, _, _ = lake
    chosen = at.multiselect(key="compare_prompts_runs").value
    assert len(chosen) == 2
    with open_store(path) as store:
        expected = compare_runs(store, chosen).frame
    shown = _table(at)
    assert len(shown) == expected.height
    by_prompt = {r["prompt"]: r for r in expected.to_dicts()}
    for row in shown.to_dict("records"):
        want = by_prompt[row["prompt"]]
        story = f"prompt?run={chosen[0]}&prompt={want['prompt_id_A']}" if want["prompt_id_A"] else None
        assert row["story"] == story or (story is None and row["story"] != row["story"])  # a link to A's story
        for col in ("pass_A", "pass_B", "diff_B"):
            assert (row[col] != row[col] and want[col] is None) or row[col] == pytest.approx(want[col])
    # every pick of the change filter shows exactly the rows with that label
    for option in at.selectbox(key="compare_prompts_change").options[1:]:
        at.selectbox(key="compare_prompts_change").set_value(option).run()
        assert set(_table(at)["change_B"]) == {option}
    at.selectbox(key="compare_prompts_change").set_value(compare_view.ANY).run()
    at.text_input(key="compare_prompts_text").set_value("*3=").run()
    assert set(_table(at)["prompt"]) == {p[1] for p in synth.EVAL_PROMPTS}


def test_side_by_side_shows_each_runs_rollouts(at, lake):
    path, ids, imported = lake
    at.multiselect(key="compare_prompts_runs").set_value([ids[0], imported]).run()
    assert not at.exception, [e.value for e in at.exception]
    sides = next(d.value for d in at.dataframe if "matched_by" in d.value.columns)
    assert list(sides["match_rate"]) == [1.0, 1.0] and list(sides["matched_by"]) == ["text", "text"]
    train = [p[1] for p in synth.PROMPTS]
    key = next(k for k in at.selectbox(key="compare_prompts_prompt").options if k in train)
    at.selectbox(key="compare_prompts_prompt").set_value(key).run()
    bodies = [h.proto.body for h in at.get("html")]
    groups = [b for b in bodies if "response (tokens coloured by entropy)" in b]
    assert len(groups) == 2, "one group of rollouts per run"
    pid_ours = next(p for p, t, _ in synth.PROMPTS if t == key)
    assert sum(f"prompt <code>{pid_ours}</code>" in b for b in bodies) == 2, "each run's group of that prompt"
    stories = [link for link in at.get("page_link") if link.proto.label.startswith("its story in")]
    assert [link.proto.label for link in stories] == ["its story in A", "its story in B"]
    assert stories[0].proto.page == "prompt" and stories[0].proto.query_string == f"run={ids[0]}&prompt={pid_ours}"


def test_before_and_after_of_one_run(at, lake):
    _, ids, _ = lake
    at.radio(key="compare_prompts_mode").set_value("two steps of one run").run()
    at.selectbox(key="compare_prompts_run").set_value(ids[0]).run()
    at.select_slider(key="compare_prompts_before_after").set_value((1, 5)).run()
    assert not at.exception, [e.value for e in at.exception]
    sides = next(d.value for d in at.dataframe if "matched_by" in d.value.columns)
    assert list(sides["label"]) == ["step 1", "step 5"]
    assert len(_table(at)) > 0


def test_table_view_sorts_filters_and_tags():
    frame = pl.DataFrame({"key": ["a", "b", "c"], "prompt": ["1+1=", "2+2=", "Hello"], "level": [1, None, None],
                          "tag": [None, "gsm8k", None], "pass_A": [0.0, 0.5, 1.0], "pass_B": [1.0, 0.5, None],
                          "rollouts_A": [4, 4, 4], "rollouts_B": [4, 4, 0], "diff_B": [1.0, 0.0, None],
                          "change_B": ["learned by B, never by A", "no clear change", "only in one"]})
    view = compare_view.table_view(frame, ["A", "B"], "B")
    assert view["key"].to_list() == ["a", "b", "c"] and view["tag"].to_list() == ["level 1", "gsm8k", None]
    view = compare_view.table_view(frame, ["A", "B"], "B", sort="B − A, largest loss first")
    assert view["key"].to_list() == ["b", "a", "c"], "nulls last"
    assert compare_view.table_view(frame, ["A", "B"], "B", text="hELLo")["key"].to_list() == ["c"]
    assert compare_view.table_view(frame, ["A", "B"], "B", tags=["gsm8k"])["key"].to_list() == ["b"]
    assert compare_view.change_options(frame, "B")[0] == compare_view.ANY
    fig = compare_view.scatter(frame, "A", "B")
    points = [k for t in fig.data if t.customdata is not None for k in t.customdata]
    assert sorted(points) == ["a", "b"], "a prompt missing on one side is not plotted"


def test_a_run_without_steps_is_said_not_raised(tmp_path, monkeypatch):
    path = tmp_path / "store"
    synth.fill(path, steps=2)
    with open_store(path) as store:
        store.create_run("empty", {"allocator": {"name": "uniform"}}, seed=0)
    app = goto(open_app(path, monkeypatch, timeout=120), PAGE)
    assert any("no steps logged yet" in i.value for i in app.info)
