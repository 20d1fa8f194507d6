"""The Live page's rollouts in flight through AppTest: what a real channel wrote (generating, idle), a
corrupt or half-written file (one line, never an exception), a run on another host, a run not running."""

from __future__ import annotations

import os
import socket

import pytest
import torch

from apptest import goto, open_app
from workbench.store.inflight import InflightChannel, inflight_file, write_file
from workbench.store import open_store


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """A store with three runs: one running here (this process's pid), one on another host, one done."""
    path = tmp_path_factory.mktemp("inflight") / "store"
    with open_store(path) as store:
        here = store.create_run("here", {"steps": 4}, seed=0, status="running", pid=os.getpid(),
                                host=socket.gethostname())
        away = store.create_run("away", {"steps": 4}, seed=0, status="running", pid=1, host="elsewhere.example")
        done = store.create_run("done", {"steps": 4}, seed=0, status="finished", pid=os.getpid())
    return path, {"here": here, "away": away, "done": done}


def live_page(path, monkeypatch, run_id):
    at = open_app(path, monkeypatch, query={"run": run_id})
    goto(at, "live")
    assert at.selectbox(key="live_run").value == run_id
    return at


def generating(path, run_id) -> InflightChannel:
    """A channel mid-batch: step 3, 8 rows, rows 1 and 5 finished after 2 and 3 tokens, the rest at 4."""
    ch = InflightChannel(path, run_id, every_s=0.0, decode=lambda ids: "".join(chr(ord("a") + i) for i in ids))
    ch.at_step(3)
    ch.begin(8, 16)
    lengths = torch.tensor([4, 2, 4, 4, 4, 3, 4, 4])
    stopped = torch.tensor([False, True, False, False, False, True, False, False])
    tokens = torch.arange(8 * 16).reshape(8, 16) % 20
    ch.tick(3, tokens, lengths, stopped)
    return ch


def test_a_generating_step_shows_its_progress_and_rows(lake, monkeypatch):
    path, ids = lake
    generating(path, ids["here"])
    at = live_page(path, monkeypatch, ids["here"])
    shown = {m.label: m.value for m in at.metric}
    assert shown["generating"] == "step 3"
    assert shown["rows finished / granted"] == "2 / 8"
    assert shown["tokens so far"] == str(4 * 6 + 2 + 3)
    rows = at.dataframe[0].value  # the first table of the page (the commands come after)
    assert list(rows["done"]) == [False, False, False]  # the slowest: still generating, longest first
    assert list(rows["row"]) == [0, 2, 3] and list(rows["tokens"]) == [4, 4, 4]
    assert rows["text"][0] == "abcd" and rows["text"][1] == "".join(chr(ord("a") + i) for i in [12, 13, 14, 15])


def test_an_ended_batch_says_no_step_is_generating(lake, monkeypatch):
    path, ids = lake
    ch = generating(path, ids["here"])
    ch.end(3, torch.zeros((8, 16), dtype=torch.long), torch.full((8,), 4), torch.ones(8, dtype=torch.bool))
    at = live_page(path, monkeypatch, ids["here"])
    said = [c.value for c in at.caption]
    assert any(c.startswith("No step is generating now: step 3, batch 1: 8 of 8 rows finished, 32 tokens") for c in said)


@pytest.mark.parametrize("payload, seq, says", [(b'{"version": 1, "state": "genera', 2, "is corrupt"),
                                               (b'{"version": 1, "state": "generating"}', 2, "field 'batch'"),
                                               (b'{"version": 1}', 5, "is half-written"),
                                               (None, 0, "is not an in-flight file")])
def test_a_corrupt_file_is_one_line_never_an_exception(lake, monkeypatch, payload, seq, says):
    path, ids = lake
    if payload is None:
        inflight_file(path, ids["here"]).write_text('{"not": "ours"}')
    else:
        write_file(inflight_file(path, ids["here"]), payload, seq=seq)
    at = live_page(path, monkeypatch, ids["here"])
    warned = [w.value for w in at.warning]
    assert len(warned) == 1 and says in warned[0] and "in-flight file" in warned[0], warned
    assert at.selectbox(key="live_allocator")  # the rest of the page is drawn


def test_a_run_elsewhere_or_not_running_says_so(lake, monkeypatch):
    path, ids = lake
    at = live_page(path, monkeypatch, ids["away"])
    assert any("works on host elsewhere.example" in i.value for i in at.info)
    at = live_page(path, monkeypatch, ids["done"])
    assert "The run is finished: no step is generating." in [c.value for c in at.caption]


def test_no_report_yet_says_how_it_is_written(lake, monkeypatch, tmp_path):
    path, ids = lake
    inflight_file(path, ids["here"]).unlink(missing_ok=True)
    at = live_page(path, monkeypatch, ids["here"])
    assert any(c.value.startswith("No step has reported generating yet") for c in at.caption)
