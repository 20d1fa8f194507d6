"""Rollouts in flight (workbench/store/inflight.py): the in-process backend's decoding loop reports to
a real channel that writes the run's in-flight file; what the file says matches what the batch
returned; the channel changes no token; a corrupt, half-written or foreign file reads as one line."""

from __future__ import annotations

import json

import pytest
import torch

from workbench.errors import ConfigError
from workbench.rollout.base import SamplingParams
from workbench.rollout.hf import HFBackend
from workbench.store.inflight import (MAGIC, InflightChannel, inflight_file, read_inflight, stepping, summary,
                                       write_file)


class Recording(InflightChannel):
    """The real channel, keeping a copy of every row it writes (what a reader could have seen)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[dict] = []

    def _write(self, row, start):
        self.seen.append(row)
        super()._write(row, start)


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
    assert len(ch.seen) == steps + 1 == ch.writes  # the start, every decoding step but the last (every_s = 0), the end
    assert 0 < ch.spent_s < batch.gen_time_s
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
    backend.progress = ch = InflightChannel(blocker, "run-4", every_s=0.0)
    batch = backend.generate(prompts, _sampling(4), seeds=[1] * 6)
    assert batch.tokens.shape[0] == 6 and ch.writes == batch.tokens.shape[1] + 1  # each tried, none raised
    report = read_inflight(blocker, "run-4")
    assert report.row is None and "cannot be read: [Errno 20] Not a directory" in report.problem


@pytest.mark.parametrize("payload, seq, magic, says", [
    (b'{"version": 1, "state": "generating", "rows": 6', 2, MAGIC, "is corrupt"),
    (b"", 2, MAGIC, "is corrupt"),
    (b"\xff\xfe", 4, MAGIC, "is corrupt"),
    (b'{"version": 1}', 3, MAGIC, "is half-written"),  # the writer died in the middle of a write
    (b'{"version": 1}', 2, b"NOTOURS!", "is not an in-flight file"),
    (b"[1, 2]", 2, MAGIC, "holds list, not an object"),
    (b'{"version": 99}', 2, MAGIC, "version 99"),
    (b'{"version": 1, "state": "generating", "batch": 1, "rows": "six"}', 2, MAGIC, "field 'rows' is 'six'"),
])
def test_a_bad_file_reads_as_one_line(tmp_path, payload, seq, magic, says):
    path = inflight_file(tmp_path, "run-5")
    write_file(path, payload, seq=seq, magic=magic)
    report = read_inflight(tmp_path, "run-5")
    assert report.row is None and says in report.problem and str(path) in report.problem


def test_a_file_of_text_or_cut_short_reads_as_one_line(tmp_path):
    path = inflight_file(tmp_path, "run-7")
    path.parent.mkdir(parents=True)
    for content in (b'{"version": 1}', b"WBINF", b""):
        path.write_bytes(content)
        assert "is not an in-flight file" in read_inflight(tmp_path, "run-7").problem


def test_a_reader_beside_a_writer_never_sees_a_torn_report(tmp_path):
    """Two threads write as fast as they can (a pipeline's generator thread shares the run's channel);
    every read is a whole report of one write."""
    import threading

    ch = InflightChannel(tmp_path, "run-8", every_s=0.0, decode=lambda ids: "x" * len(ids))
    ch.begin(16, 64)
    stop = threading.Event()

    def write() -> None:
        k = 0
        while not stop.is_set():
            k = k % 64 + 1
            ch.tick(k, torch.zeros((16, 64), dtype=torch.long), torch.full((16,), k), torch.zeros(16, dtype=torch.bool))

    threads = [threading.Thread(target=write) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        reports = [read_inflight(tmp_path, "run-8") for _ in range(300)]
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    rows = [r.row for r in reports if r.row is not None]
    assert len(rows) >= 250, [r.problem for r in reports if r.problem][:3]  # a few may find a write under way
    for row in rows:  # each report is one write's: its counts and texts agree
        k = max(0, row["decode_step"] - 1)  # step t after t + 1 tokens; 0: the batch's start
        assert row["tokens"] == 16 * k and all(s["text"] == "x" * k for s in row["samples"])


def test_a_resumed_run_goes_on_in_the_same_file(tmp_path):
    InflightChannel(tmp_path, "run-9").begin(4, 8)
    again = InflightChannel(tmp_path, "run-9")
    again.at_step(5)
    again.begin(2, 8)
    assert read_inflight(tmp_path, "run-9").row["step"] == 5 and again._seq == 4


def test_a_long_text_is_cut_to_its_end(tmp_path):
    ch = InflightChannel(tmp_path, "run-10", every_s=0.0, decode=lambda ids: "".join(str(i % 10) for i in ids))
    ch.begin(1, 1000)
    ch.tick(999, torch.arange(1000).unsqueeze(0), torch.tensor([1000]), torch.tensor([False]))
    text = read_inflight(tmp_path, "run-10").row["samples"][0]["text"]
    assert text == "…" + "".join(str(i % 10) for i in range(600, 1000))


def test_a_bad_state_or_entry_is_named(tmp_path):
    good = InflightChannel(tmp_path, "run-6")._row("generating", 0, 0, 0, [], [])
    path = inflight_file(tmp_path, "run-6")
    for change, says in [({"state": "dreaming"}, "field 'state'"), ({"slowest": [{"row": "x"}]}, "'slowest'"),
                         ({"samples": [{"row": 1}]}, "'samples'"), ({"step": "3"}, "field 'step'"),
                         ({"rows": True}, "field 'rows'")]:
        write_file(path, json.dumps({**good, **change}).encode())
        assert says in read_inflight(tmp_path, "run-6").problem
    write_file(path, json.dumps(good).encode())
    assert read_inflight(tmp_path, "run-6").problem is None
    assert read_inflight(tmp_path, "no-such-run") == read_inflight(None, "run-6")  # nothing there: no problem


def test_the_interval_is_checked():
    from workbench.config import LoggingConfig

    assert LoggingConfig(inflight_s=0).inflight_s == 0
    with pytest.raises(ConfigError, match="logging.inflight_s"):
        LoggingConfig(inflight_s=-1)
    with pytest.raises(ConfigError, match="logging.inflight_s"):
        LoggingConfig(inflight_s=0.001)
