"""`workbench store copy`: a store directory copied into a bucket of a real S3 server (moto's, on a
loopback port) and back, every table's rows equal to the source's on each side (rolled-back rows,
inlined rows, compacted files, snapshots), no credential in anything written; and its refusals."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.errors import StoreError
from workbench.store import TABLES, open_store
from workbench.store.copy import copy_store
from workbench.store.maintenance import compact
from workbench.store.s3local import local_s3
from workbench.store.synthetic import Shape, SyntheticRun

SECRET = "wbCopySecret0123456789abcdef"
BUCKET = "wb-copy"
SMALL = Shape(prompts_per_step=4, rollouts_per_prompt=4, tokens=12, prompt_pool=20, blocks=2)


@pytest.fixture(scope="module")
def s3():
    with local_s3(BUCKET, secret=SECRET) as server:
        yield server


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A store with compacted files, a partial rollback (rows deleted inside a file), rows still
    inlined in the catalog, and two runs."""
    root = tmp_path_factory.mktemp("copy") / "src"
    with open_store(root, upkeep_every=0) as st:
        a = st.create_run("a", {"note": "first"}, seed=0)
        syn = SyntheticRun(a, SMALL, seed=0)
        st.write_steps([syn.step(s) for s in range(6)])  # one file holding six steps
        st.rollback_run(a, 3)  # deletes steps 4-5's rows inside that file
        compact(st, older_than_s=3600)  # files merged, inlined rows flushed; old snapshots kept
        b = st.create_run("b", {}, seed=1)
        syn_b = SyntheticRun(b, SMALL, seed=1)
        for step in range(2):
            st.write_step(syn_b.step(step))
        st.add_event(b, "info", "note", "after the compaction: inlined in the catalog")
        st.set_run_status(a, "finished")
        st.set_run_status(b, "finished")
    return root


def _rows(st) -> dict[str, list[str]]:
    """Every row of every table of an open store, and its snapshots."""
    out = {t: sorted(repr(sorted(r.items())) for r in st.sql(f"SELECT * FROM {t}").to_dicts()) for t in TABLES}
    out["snapshots"] = [repr(st._lake.read("SELECT snapshot_id, changes FROM ducklake_snapshots('lake') "
                                            "ORDER BY snapshot_id").to_dicts())]
    return out


def test_copy_to_the_bucket_and_back_keeps_every_row(s3, source, tmp_path):
    from workbench.cli import app

    with open_store(source, read_only=True) as st:
        want = _rows(st)
    assert len(want["rollouts"]) == 4 * 16 + 2 * 16 and len(want["events"]) == 1
    catalog = tmp_path / "team" / "catalog.sqlite"
    url = f"s3://{BUCKET}/team"
    out = CliRunner().invoke(app, ["store", "copy", str(source), url, "--catalog", str(catalog), "--json"])
    assert out.exit_code == 0, out.output
    keys = [o["Key"] for o in s3.objects(BUCKET, "team/")]
    assert keys and all(k.startswith("team/main/") and k.endswith(".parquet") for k in keys)
    with open_store(url, catalog=str(catalog), read_only=True) as st:
        assert _rows(st) == want  # every row and every snapshot, read from the bucket
    back = tmp_path / "back"
    out = CliRunner().invoke(app, ["--catalog", str(catalog), "store", "copy", url, str(back)])
    assert out.exit_code == 0, out.output
    assert "rows equal in every table" in out.output
    with open_store(back) as st:  # the copy is a store like any other: it takes new steps
        assert _rows(st) == want
        run = st.create_run("c", {}, seed=2)
        st.write_step(SyntheticRun(run, SMALL, seed=2).step(0))
        assert st.count_rollouts(run) == 16
    grep = subprocess.run(["grep", "-rlaF", SECRET, str(tmp_path)], capture_output=True, text=True)
    assert grep.stdout == ""  # no credential in the catalog or any copied file
    for key in keys:
        assert SECRET.encode() not in s3.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()


def test_copy_refusals(s3, source, tmp_path, monkeypatch):
    from workbench.cli import app

    live = tmp_path / "live"
    with open_store(live) as st:  # a run whose process beats now
        st.create_run("now", {}, seed=0, status="running")
    out = CliRunner().invoke(app, ["store", "copy", str(live), str(tmp_path / "live-copy")])
    assert out.exit_code == 1 and "is running (heartbeat" in str(out.exception)
    catalog = str(tmp_path / "c.sqlite")
    taken = f"s3://{BUCKET}/taken"
    s3.client().put_object(Bucket=BUCKET, Key="taken/notes.txt", Body=b"x")
    with pytest.raises(StoreError, match="already holds"):  # a prefix that holds files
        copy_store(source, taken, dst_catalog=str(tmp_path / "other.sqlite"))
    Path(catalog).write_bytes(b"")
    with pytest.raises(StoreError, match="already exists"):  # a catalog that exists
        copy_store(source, f"s3://{BUCKET}/fresh", dst_catalog=catalog)
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("x")
    with pytest.raises(StoreError, match="not an empty directory"):
        copy_store(source, full)
    with pytest.raises(StoreError, match="not a store"):
        copy_store(tmp_path / "nothing", tmp_path / "dst")
    with pytest.raises(StoreError, match="PostgreSQL"):
        copy_store(source, f"s3://{BUCKET}/pg", dst_catalog="postgres:dbname=x host=nowhere")
    fd = os.open(source / ".write.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a commit in progress
        with pytest.raises(StoreError, match="being written"):
            copy_store(source, tmp_path / "while-writing")
    finally:
        os.close(fd)
    assert not (tmp_path / "while-writing" / "catalog.sqlite").exists()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no DuckDB secret of the user's either
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    with pytest.raises(StoreError, match="no credentials for s3://wb-copy") as refused:
        copy_store(source, f"s3://{BUCKET}/nokeys", dst_catalog=str(tmp_path / "k.sqlite"))
    assert "\n" not in str(refused.value)
    assert not Path(tmp_path / "k.sqlite").exists()
