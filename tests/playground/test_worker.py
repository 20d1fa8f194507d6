"""The Playground's worker process (workbench/playground/worker.py): a real `python -m
workbench.playground.worker` serving the tiny run trained for this folder."""

from __future__ import annotations

import os

import pytest

from waiting import wait_until
from workbench.errors import ConfigError
from workbench.playground.sample import SampleRequest, sample
from workbench.playground.worker import MAX_QUEUED, WORKER_NICE, Worker


@pytest.fixture
def worker(trained):
    root, _ = trained
    w = Worker(str(root))
    yield w
    w.close()


def _finished(worker, rid, timeout=180):
    wait_until(lambda: worker.status(rid)["state"] in ("done", "failed", "cancelled"), timeout, f"request {rid}")
    return worker.status(rid)


def test_the_worker_draws_the_librarys_tokens_at_a_lower_priority(trained, policy_at, worker):
    root, rid = trained
    pid = policy_at(0).task.train_prompts()[2].id
    requests = [SampleRequest(rid, step, prompt_id=pid, n=6, seed=9) for step in (0, 4)]
    ids = [worker.submit(r) for r in requests]  # queued behind each other, served in order
    got = [_finished(worker, i) for i in ids]
    assert [g["state"] for g in got] == ["done", "done"], got
    for request, g in zip(requests, got):
        own = sample(policy_at(request.checkpoint), request)
        assert [s["tokens"] for s in g["result"]["samples"]] == [s["tokens"] for s in own["samples"]]
    assert os.getpriority(os.PRIO_PROCESS, worker.proc.pid) >= WORKER_NICE


def test_bad_requests_are_refused_in_one_line_and_the_worker_goes_on(trained, worker):
    root, rid = trained
    with pytest.raises(ConfigError, match="n: 10000 samples"):
        worker.submit(SampleRequest(rid, 0, prompt="1+1=", n=10_000))
    with pytest.raises(ConfigError, match="prompt: 1,000,000 characters"):
        worker.submit(SampleRequest(rid, 0, prompt="x" * 1_000_000))
    absent = _finished(worker, worker.submit(SampleRequest(rid, 99, prompt="1+1=", n=2)))
    assert absent["state"] == "failed" and "no checkpoint of step 99" in absent["error"]
    assert "\n" not in absent["error"]
    fine = _finished(worker, worker.submit(SampleRequest(rid, 2, prompt="1+1=", n=2)))
    assert fine["state"] == "done" and worker.alive()


def test_requests_are_cancelled_and_the_queue_is_bounded(trained):
    """A request cancelled while its model loads stops before decoding; one cancelled while queued
    never starts; a full queue refuses the next request; the others are served."""
    root, rid = trained
    w = Worker(str(root))
    try:
        first = w.submit(SampleRequest(rid, 3, prompt="1+1=", n=2))  # checkpoint 3: loaded on demand
        queued = [w.submit(SampleRequest(rid, 0, prompt="1+1=", n=1)) for _ in range(MAX_QUEUED - 1)]
        with pytest.raises(ConfigError, match=f"request: {MAX_QUEUED} requests are queued or running"):
            w.submit(SampleRequest(rid, 0, prompt="1+1=", n=1))
        w.cancel(queued[0])
        wait_until(lambda: w.status(first)["state"] != "queued", 120, "the first request to start")
        w.cancel(first)
        assert _finished(w, first)["state"] == "cancelled"
        assert _finished(w, queued[0])["state"] == "cancelled"
        assert [_finished(w, q)["state"] for q in queued[1:]] == ["done"] * (MAX_QUEUED - 2)
    finally:
        w.close()
    assert not w.alive()
