"""Riding out an outage of the store (issue #39): object storage behind a loopback proxy that the
test takes down (`workbench.store.tcpproxy`), a PostgreSQL catalog whose server is stopped. The
writer retries and queues steps in memory, says so in the run's status file while it lasts, pauses at
its bound and goes on when the store is back; every step lands once, in order, and an event records
the outage. The 60 s outages of whole organism runs are in tests/reliability/test_store_outage.py."""

from __future__ import annotations

import threading

import pytest

from tests.waiting import wait_until
from workbench.errors import StoreError, StoreUnreachable
from workbench.store import open_store
from workbench.store.group import GroupWriter
from workbench.store.outage import clear_status, describe, read_statuses, write_status
from workbench.store.s3local import local_s3
from workbench.store.synthetic import Shape, SyntheticRun
from workbench.store.tcpproxy import TcpProxy
from workbench.store.s3local import environ

BUCKET = "wb-outage"
SMALL = Shape(prompts_per_step=4, rollouts_per_prompt=4, tokens=12, prompt_pool=20, blocks=2)


@pytest.fixture(scope="module")
def proxied_s3():
    """A local S3 server reached through a proxy the test can take down; the environment points at
    the proxy."""
    with local_s3(BUCKET, set_env=False) as server, TcpProxy(server.port) as proxy:
        with environ({**server.env, "AWS_ENDPOINT_URL": proxy.endpoint}):
            yield server, proxy


def test_the_proxy_forwards_and_refuses_while_down(proxied_s3):
    server, proxy = proxied_s3
    import boto3

    client = boto3.client("s3", endpoint_url=proxy.endpoint, aws_access_key_id=server.env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=server.env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    client.put_object(Bucket=BUCKET, Key="probe", Body=b"x")
    proxy.stop()
    try:
        import socket

        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=2).close()
    finally:
        proxy.start()
    assert client.get_object(Bucket=BUCKET, Key="probe")["Body"].read() == b"x"


def test_bound_pause_and_resume_when_the_store_is_back(proxied_s3, tmp_path):
    """Steps queue while the store is down; at the bound `submit` blocks (the run pauses); when the
    store is back every step commits in order, the status file goes and the listener hears the end."""
    _, proxy = proxied_s3
    heard: list[tuple[str, dict]] = []
    folder = tmp_path / "local"

    def listener(what: str, info: dict) -> None:
        heard.append((what, dict(info)))
        if what == "end":
            clear_status(folder, run_id)
        else:
            write_status(folder, run_id, state=what, since=info["since"], queued_steps=info["queued_steps"],
                         bound=3, error=info.get("error"))

    with open_store(f"s3://{BUCKET}/bound", catalog=str(tmp_path / "catalog.sqlite"), upkeep_every=0) as st:
        run_id = st.create_run("bound", {}, seed=0)
        syn = SyntheticRun(run_id, SMALL, seed=0)
        writer = GroupWriter(st, max_queued_steps=3, listener=listener)
        writer.submit(syn.step(0))
        writer.flush()
        proxy.stop()
        try:
            writer.submit(syn.step(1))
            wait_until(lambda: writer.outage is not None, 30, "the writer to notice the outage")
            status = read_statuses(folder)[run_id]
            assert status["state"] == "retrying" and "store unreachable, retrying since" in status["message"]
            writer.submit(syn.step(2))
            # the third queued step reaches the bound: submit blocks until the store is back
            third = threading.Thread(target=writer.submit, args=(syn.step(3),))
            third.start()
            wait_until(lambda: read_statuses(folder).get(run_id, {}).get("state") == "paused", 30,
                       "the status to say paused")
            third.join(0.5)  # a window in which submit must not return (the thing under test)
            assert third.is_alive(), "submit returned at the bound while the store was down"
            assert "paused at the bound of 3" in read_statuses(folder)[run_id]["message"]
        finally:
            proxy.start()
        third.join(60)
        assert not third.is_alive()
        writer.submit(syn.step(4))
        writer.close()
        assert st.run_steps(run_id)["step"].to_list() == [0, 1, 2, 3, 4]
        assert st.count_rollouts(run_id) == 5 * 16
        assert read_statuses(folder) == {}
        ends = [info for what, info in heard if what == "end"]
        assert len(ends) == 1 and ends[0]["steps_queued"] == 3 and ends[0]["paused"]
        assert ends[0]["end"] > ends[0]["start"]
        assert len(writer.outages) == 1


def test_a_store_opened_while_its_object_storage_is_down_fails_in_one_line(proxied_s3, tmp_path):
    _, proxy = proxied_s3
    proxy.stop()
    try:
        with pytest.raises(StoreUnreachable) as err:
            open_store(f"s3://{BUCKET}/down", catalog=str(tmp_path / "catalog.sqlite"))
    finally:
        proxy.start()
    assert "\n" not in str(err.value) and "cannot open store" in str(err.value)


def test_status_files_round_trip_and_left_overs_are_skipped(tmp_path):
    import datetime as dt
    import json

    since = dt.datetime(2026, 12, 4, 22, 41, 3, tzinfo=dt.timezone.utc)
    write_status(tmp_path, "run-a", state="retrying", since=since, queued_steps=2, bound=256, error="down")
    row = read_statuses(tmp_path)["run-a"]
    assert row["message"] == "store unreachable, retrying since 2026-12-04 22:41:03 UTC (2 steps queued, bound 256)"
    gone = json.loads((tmp_path / "status" / "run-a.json").read_text())
    gone.update(run_id="run-b", pid=2**22 + 12345)  # no such process: a file left by a killed run
    (tmp_path / "status" / "run-b.json").write_text(json.dumps(gone))
    (tmp_path / "status" / "run-c.json").write_text("{not json")
    assert set(read_statuses(tmp_path)) == {"run-a"}
    assert describe({**row, "state": "paused"}).startswith("store unreachable, retrying since 2026-12-04 22:41:03 UTC: "
                                                           "paused at the bound of 256")
    clear_status(tmp_path, "run-a")
    assert read_statuses(tmp_path) == {}
    with pytest.raises(ValueError, match="outage state"):
        write_status(tmp_path, "run-a", state="down", since=since, queued_steps=0, bound=1)
    assert issubclass(StoreUnreachable, StoreError)


def test_workbench_runs_shows_a_runs_outage_and_what_it_says_when_the_store_is_down(proxied_s3, tmp_path,
                                                                                  monkeypatch):
    """`workbench runs` adds a run's status file to its line; with the store down it prints the runs'
    own lines from their files, then fails in one line."""
    import datetime as dt
    import json

    from typer.testing import CliRunner

    from workbench.cli import app

    _, proxy = proxied_s3
    catalog, url = tmp_path / "catalog.sqlite", f"s3://{BUCKET}/cli"
    with open_store(url, catalog=str(catalog)) as st:
        run_id = st.create_run("cli", {}, seed=0, status="running")
    since = dt.datetime(2026, 12, 4, 22, 41, 3, tzinfo=dt.timezone.utc)
    write_status(tmp_path, run_id, state="paused", since=since, queued_steps=4, bound=4, error="down")
    monkeypatch.delenv("WORKBENCH_CATALOG", raising=False)
    base = ["--catalog", str(catalog), "runs", "--store", url]
    runner = CliRunner()
    out = runner.invoke(app, base)
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if x.startswith(run_id))
    assert "store unreachable, retrying since 2026-12-04 22:41:03 UTC: paused at the bound of 4" in line
    out = runner.invoke(app, [*base, "--json"])
    assert json.loads(out.output)[0]["store_status"].startswith("store unreachable")
    proxy.stop()
    try:
        down = runner.invoke(app, base)
        down_json = runner.invoke(app, [*base, "--json"])
    finally:
        proxy.start()
    assert down.exit_code == 1
    assert f"{run_id}  paused    store unreachable, retrying since 2026-12-04 22:41:03 UTC" in down.output
    assert isinstance(down.exception, (SystemExit, StoreUnreachable))
    assert down_json.exit_code == 1
    assert json.loads(down_json.stdout)[0]["store_status"].startswith("store unreachable")


def test_the_dashboard_shows_the_runs_outage_when_the_store_cannot_be_read(proxied_s3, tmp_path, monkeypatch):
    """The app started on an s3:// store whose server is down: the Runs and Live pages show what the
    runs' status files say and the error's line, and raise nothing."""
    import datetime as dt
    from pathlib import Path

    pytest.importorskip("streamlit")
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    _, proxy = proxied_s3
    catalog, url = tmp_path / "catalog.sqlite", f"s3://{BUCKET}/app"
    with open_store(url, catalog=str(catalog)) as store:
        run_id = store.create_run("app", {}, seed=0, status="running")
    since = dt.datetime(2026, 12, 4, 22, 41, 3, tzinfo=dt.timezone.utc)
    write_status(tmp_path, run_id, state="retrying", since=since, queued_steps=5, bound=256, error="down")
    monkeypatch.setenv("WORKBENCH_STORE", url)
    monkeypatch.setenv("WORKBENCH_CATALOG", str(catalog))
    st.cache_data.clear()
    st.cache_resource.clear()
    main = str(Path(__file__).resolve().parents[2] / "app" / "main.py")
    proxy.stop()
    try:
        at = AppTest.from_file(main, default_timeout=120)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert f"{run_id}: store unreachable, retrying since 2026-12-04 22:41:03 UTC (5 steps queued, bound 256)" in \
            [w.value for w in at.warning]
        assert any("unreachable" in e.value for e in at.error)
        at.switch_page("app_pages/live.py").run()
        assert not at.exception, [e.value for e in at.exception]
        assert any("store unreachable, retrying since" in w.value for w in at.warning)
    finally:
        proxy.start()
        st.cache_resource.clear()
