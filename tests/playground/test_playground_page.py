"""The Playground page (app/app_pages/playground.py) through Streamlit's AppTest on the tiny run trained
for this folder: a control session samples two checkpoints and the initial model through the worker
process and sees the library's samples; a read-only session cannot sample and sees what was computed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from waiting import wait_until  # noqa: E402
from workbench.access import ENV, Gate  # noqa: E402
from workbench.playground.sample import SampleRequest, sample  # noqa: E402

MAIN = str(Path(__file__).resolve().parents[2] / "app" / "main.py")


def _open(root, rid, monkeypatch, **params):
    import streamlit as st

    monkeypatch.setenv("WORKBENCH_STORE", str(root))
    st.cache_data.clear()
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.query_params.update({"run": rid, **params})
    at.run()
    at.switch_page("app_pages/playground.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _html(at) -> str:
    return "".join(h.proto.body for h in at.get("html"))


@pytest.fixture(scope="module", autouse=True)
def stop_workers():
    yield
    from app import playground

    for w in list(playground._WORKERS.values()):  # noqa: SLF001 - the test's own cleanup
        w.close()


def test_a_control_session_samples_checkpoints_side_by_side(trained, policy_at, monkeypatch):
    root, rid = trained
    pid = policy_at(0).task.train_prompts()[3].id
    at = _open(root, rid, monkeypatch, prompt=pid, step="3")  # as sent from a rollout of step 3
    assert at.multiselect(key="playground_ckpts").value == [2]  # the weights that sampled step 3
    assert at.radio(key="playground_source").value == "train set"
    assert at.selectbox(key="playground_prompt_id").value == pid
    at.multiselect(key="playground_ckpts").set_value([2, 4])
    at.checkbox(key="playground_initial").check()
    at.number_input(key="playground_seed").set_value(7)
    at.button(key="playground_go").click().run()
    assert not at.exception, [e.value for e in at.exception]

    def shown() -> bool:
        at.run()
        return len(re.findall('class="playground-sample"', _html(at))) == 3 * 8

    wait_until(shown, 240, "the three checkpoints' samples on the page")
    assert [h.value for h in at.subheader] == ["initial model", "checkpoint 2", "checkpoint 4"]
    from app import playground

    served = playground.statuses(at.session_state["playground_batch"])
    for step, got in zip((0, 2, 4), served):  # the worker's tokens are the library's for the same request
        own = sample(policy_at(step), SampleRequest(rid, step, prompt_id=pid, n=8, seed=7, temperature=1.0,
                                                    top_p=1.0, top_k=0, max_new_tokens=8))
        assert [s["tokens"] for s in got["result"]["samples"]] == [s["tokens"] for s in own["samples"]]
        assert got["result"]["correct"] == own["correct"]
    assert len(at.dataframe) == 3  # a pass@k table per checkpoint


@pytest.mark.slow  # it reads what the control session of the test before (slow: it samples) computed
def test_a_read_only_session_cannot_sample_and_sees_what_was_computed(trained, monkeypatch):
    root, rid = trained
    gate = Gate(open_without_token=False)
    gate.add_token("r" * 32, "read")
    monkeypatch.setenv(ENV, gate.to_env())
    at = _open(root, rid, monkeypatch)
    assert at.button(key="playground_go").disabled
    assert any("Read-only access" in c.value for c in at.caption)
    # what the control session (the test before, in this dashboard process) computed is shown
    assert [h.value for h in at.subheader] == ["initial model", "checkpoint 2", "checkpoint 4"]
    assert len(re.findall('class="playground-sample"', _html(at))) == 3 * 8


def test_refusals_are_one_line_and_the_page_stays_up(trained, monkeypatch):
    root, rid = trained
    at = _open(root, rid, monkeypatch)
    at.radio(key="playground_source").set_value("typed").run()
    at.button(key="playground_go").click().run()  # no prompt text: refused before the worker
    assert not at.exception
    assert any("refused: prompt" in e.value for e in at.error)
    at.multiselect(key="playground_ckpts").set_value([])
    at.checkbox(key="playground_initial").uncheck()
    at.button(key="playground_go").click().run()
    assert any("Pick a checkpoint" in e.value for e in at.error)


def test_the_pages_url_reopens_its_view(trained, policy_at, monkeypatch):
    from app import playground_view as view

    root, rid = trained
    pid = policy_at(0).task.eval_prompts()[0].id
    at = _open(root, rid, monkeypatch, **view.url_of(rid, [4, 2], True, pid))
    assert at.multiselect(key="playground_ckpts").value == [2, 4]
    assert at.checkbox(key="playground_initial").value is True
    assert at.radio(key="playground_source").value == "held-out set"
    assert at.selectbox(key="playground_prompt_id").value == pid
    assert view.checkpoints_from_url({"ckpts": "4,x"}, [2, 4]) == view.checkpoints_from_url({}, [2, 4]) == [4]
    assert view.checkpoints_from_url({"step": "3"}, [1, 2, 4]) == [2]
