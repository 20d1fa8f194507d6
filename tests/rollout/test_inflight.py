"""Rollouts in flight (workbench/rollout/inflight.py): the in-process backend's decoding loop reports to
a real channel that writes the run's in-flight file; what the file says matches what the batch
returned; the channel changes no token; a corrupt, half-written or foreign file reads as one line."""

from __future__ import annotations

import json

import pytest
import torch

from workbench.errors import ConfigError
from workbench.rollout.base import SamplingParams
from workbench.rollout.hf import HFBackend
from workbench.rollout.inflight import InflightChannel, inflight_file, read_inflight, stepping, summary


class Recording(InflightChannel):
    """The real channel, keeping a copy of every row it writes (what a reader could have seen)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[dict] = []

    def _write(self, row):
        self.seen.append(row)
        super()._write(row)


def _sampling(tokens=24):
    return SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=tokens)


def test_the_file_follows_the_batch(model, tokenizer, prompts, tmp_path):
    backend = HFBackend(model, tokenizer, "cpu")
    seeds = [11, 11, 11, 12, 12, 12]
    plain = backend.generate(prompts, _sampling(), seeds=seeds)
    backend.progress = ch = Recording(tmp_path, "run-1", every_s=0.0, decode=lambda ids: tokenizer.decode(ids))
    with stepping(backend, 7):
        batch = backend.generate(prompts, _sampling(), seeds=seeds)
    assert torch.equal(batch.tokens, plain.tokens) and torch.equal(batch.lengths, plain.lengths)  # changes nothing
    steps = batch.tokens.shape[1]
    assert len(ch.seen) == steps + 2 == ch.writes  # the start, every decoding step (every_s = 0), the end
    first, last = ch.seen[0], ch.seen[-1]
    assert (first["state"], first["rows"], first["finished"], first["tokens"]) == ("generating", 6, 0, 0)
    tokens = [r["tokens"] for r in ch.seen]
    assert tokens == sorted(tokens) and tokens[-1] == int(batch.lengths.sum())  # progress only advances
    assert [r["finished"] for r in ch.seen] == sorted(r["finished"] for r in ch.seen)
    assert last["state"] == "idle" and last["step"] == 7 and last["step_tokens"] == int(batch.lengths.sum())
    done = batch.finished | (batch.lengths >= steps)
    assert last["finished"] == int(done.sum())
    # the slowest rows: the longest first, each with its text so far (the batch's own tokens, decoded)
    longest = int(batch.lengths.max())
    assert last["slowest"][0]["tokens"] == longest
    for s in last["samples"]:
        i = s["row"]
        assert s["text"] == tokenizer.decode(batch.tokens[i, :int(batch.lengths[i])].tolist())
    assert ch.step is None  # the block labelled only its own generation
    report = read_inflight(tmp_path, "run-1")
    assert report.problem is None and report.row == last and report.age_s is not None and report.age_s >= 0
    assert summary(report.row).startswith(f"step 7, batch 1: {last['finished']} of 6 rows finished")


def test_writes_between_start_and_end_are_throttled(model, tokenizer, prompts, tmp_path):
    backend = HFBackend(model, tokenizer, "cpu")
    backend.progress = ch = Recording(tmp_path, "run-2", every_s=3600.0)
    batch = backend.generate(prompts, _sampling(), seeds=[1] * 6)
    assert batch.tokens.shape[1] > 2
    assert [r["state"] for r in ch.seen] == ["generating", "idle"]  # no write in between within the hour
    assert ch.seen[-1]["step"] is None and ch.seen[-1]["samples"][0]["text"] is None  # no tokenizer: no text


def test_a_second_batch_of_the_step_adds_its_tokens(model, tokenizer, prompts, tmp_path):
    backend = HFBackend(model, tokenizer, "cpu")
    backend.progress = ch = InflightChannel(tmp_path, "run-3", every_s=10.0)
    with stepping(backend, 2):
        a = backend.generate(prompts, _sampling(8), seeds=[1] * 6)
        b = backend.generate(prompts[:2], _sampling(8), seeds=[2] * 2)
    row = read_inflight(tmp_path, "run-3").row
    assert (row["batch"], row["rows"], row["tokens"]) == (2, 2, int(b.lengths.sum()))
    assert row["step_tokens"] == int(a.lengths.sum() + b.lengths.sum())


def test_an_unwritable_folder_never_stops_the_batch(model, tokenizer, prompts, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    backend = HFBackend(model, tokenizer, "cpu")
    backend.progress = InflightChannel(blocker, "run-4", every_s=0.0)
    batch = backend.generate(prompts, _sampling(4), seeds=[1] * 6)
    assert batch.tokens.shape[0] == 6
    assert read_inflight(blocker, "run-4").row is None


@pytest.mark.parametrize("text, says", [
    ('{"version": 1, "state": "generating", "rows": 6', "corrupt or half-written"),
    ("", "corrupt or half-written"),
    ("[1, 2]", "holds list, not an object"),
    ('{"version": 99}', "version 99"),
    ('{"version": 1, "state": "generating", "batch": 1, "rows": "six"}', "field 'rows' is 'six'"),
])
def test_a_bad_file_reads_as_one_line(tmp_path, text, says):
    path = inflight_file(tmp_path, "run-5")
    path.parent.mkdir(parents=True)
    path.write_text(text)
    report = read_inflight(tmp_path, "run-5")
    assert report.row is None and says in report.problem and str(path) in report.problem


def test_a_bad_state_or_entry_is_named(tmp_path):
    good = InflightChannel(tmp_path, "run-6")._row("generating", 0, 0, 0, [], [])
    path = inflight_file(tmp_path, "run-6")
    path.parent.mkdir(parents=True)
    for change, says in [({"state": "dreaming"}, "field 'state'"), ({"slowest": [{"row": "x"}]}, "'slowest'"),
                         ({"step": "3"}, "field 'step'")]:
        path.write_text(json.dumps({**good, **change}))
        assert says in read_inflight(tmp_path, "run-6").problem
    path.write_text(json.dumps(good))
    assert read_inflight(tmp_path, "run-6").problem is None
    assert read_inflight(tmp_path, "no-such-run") == read_inflight(None, "run-6")  # nothing there: no problem


def test_the_interval_is_checked():
    from workbench.config import LoggingConfig

    assert LoggingConfig(inflight_s=0).inflight_s == 0
    with pytest.raises(ConfigError, match="logging.inflight_s"):
        LoggingConfig(inflight_s=-1)
    with pytest.raises(ConfigError, match="logging.inflight_s"):
        LoggingConfig(inflight_s=0.001)
