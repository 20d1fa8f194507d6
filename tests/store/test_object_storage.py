"""A store whose data lives in object storage (`s3://bucket/prefix/`), against a real S3 server (moto's,
on a loopback port, started here: DuckDB's HTTP client talks to it as to AWS or MinIO), with the
catalog in a local SQLite file. The engine, resume and rollback, guards, the importer, the SQL
console, maintenance, the store commands and the dashboard's data module on it; credentials found in
none of the files the store writes; what cannot work refused in one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.engine import resume, run
from workbench.engine.checkpoint import checkpoint_dir, latest_checkpoint
from workbench.errors import StoreError
from workbench.store import open_store
from workbench.store.group import GroupWriter
from workbench.store.maintenance import compact, info
from workbench.store.s3local import local_s3
from workbench.store.synthetic import Shape, SyntheticRun

SECRET = "wbTestSecret0123456789abcdef"
BUCKET = "wb-test"
SMALL = Shape(prompts_per_step=4, rollouts_per_prompt=4, tokens=12, prompt_pool=20, blocks=2)


@pytest.fixture(scope="module")
def s3():
    """A local S3 server with one bucket, its AWS variables in the environment for the module."""
    with local_s3(BUCKET, secret=SECRET) as server:
        yield server


def _keys(s3, prefix: str) -> list[str]:
    return [o["Key"] for o in s3.objects(BUCKET, prefix)]


def _holds_secret(folder: Path) -> list[str]:
    out = subprocess.run(["grep", "-rlaF", SECRET, str(folder)], capture_output=True, text=True)
    return out.stdout.split()


def test_group_commit_compaction_and_no_secret_anywhere(s3, tmp_path):
    catalog = tmp_path / "node" / "catalog.sqlite"
    url = f"s3://{BUCKET}/group"
    with open_store(url, catalog=str(catalog)) as st:
        assert st.location.data_path == f"{url}/" and st.location.lock_dir == catalog.parent
        run_id = st.create_run("s3", {"note": "no keys here"}, seed=0)
        syn = SyntheticRun(run_id, SMALL, seed=0)
        writer = GroupWriter(st, commit_max_rows=48, commit_interval_s=0.05)  # several steps per commit
        for step in range(12):
            writer.submit(syn.step(step))
        writer.close()
        assert max(steps for steps, _, _ in writer.commits) > 1
        st.add_event(run_id, "info", "note", "written")
        assert st.count_rollouts(run_id) == 12 * 16
        assert st.run_steps(run_id)["step"].to_list() == list(range(12))
        before = len(_keys(s3, "group/"))
        assert before >= 4  # group commits wrote the rollouts' files to the bucket
        orphan = "group/main/rollouts/ducklake-left-by-a-killed-writer.parquet"
        s3.client().put_object(Bucket=BUCKET, Key=orphan, Body=b"PAR1")  # a file no snapshot names
        out = compact(st, older_than_s=0)  # flush inlined rows, merge, expire snapshots, drop old files
        assert out["after"]["snapshots"] == 1 and out["after"]["files"] < out["before"]["files"] + 9
        tables = info(st)["tables"]
        for table in ("runs", "steps", "events", "allocations", "prompt_stats"):  # inlined rows reached the bucket
            assert tables[table]["rows"] and tables[table]["files"] >= 1, table
        after = _keys(s3, "group/")
        assert len(after) < before + len(tables) and orphan not in after  # old and orphaned files deleted
        assert st.count_rollouts(run_id) == 12 * 16  # nothing lost, nothing doubled
        with pytest.raises(StoreError) as refused:
            st.sql("SELECT * FROM nope")
    with open_store(url, catalog=str(catalog), read_only=True) as ro:  # a reader of the same store
        assert ro.count_rollouts(run_id) == 12 * 16
    assert SECRET not in str(refused.value)
    assert _holds_secret(tmp_path) == []
    for key in after:  # and none of the Parquet files in the bucket
        assert SECRET.encode() not in s3.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()


def test_a_commit_waits_out_a_server_that_stops_answering(s3, tmp_path):
    """The S3 server down for 2 s while a step commits: the writer retries and the step lands once."""
    import threading

    with open_store(f"s3://{BUCKET}/outage", catalog=str(tmp_path / "catalog.sqlite"), upkeep_every=0) as st:
        run_id = st.create_run("outage", {}, seed=0)
        syn = SyntheticRun(run_id, SMALL, seed=0)
        st.write_step(syn.step(0))
        s3.stop()
        restart = threading.Timer(2.0, s3.start)
        restart.start()
        try:
            st.write_steps([syn.step(1), syn.step(2)])  # its Parquet file cannot be written until the server is back
        finally:
            restart.join()
        assert st.run_steps(run_id)["step"].to_list() == [0, 1, 2] and st.count_rollouts(run_id) == 3 * 16


def test_a_duckdb_secret_of_the_user_serves_without_keys_in_the_environment(s3, tmp_path, monkeypatch):
    import duckdb

    from workbench.store.extensions import load_extension

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # DuckDB's persistent secrets live under ~/.duckdb
    con = duckdb.connect()
    load_extension(con, "httpfs")
    con.execute(f"CREATE PERSISTENT SECRET mine (TYPE s3, SCOPE 's3://{BUCKET}', KEY_ID 'AKIAWORKBENCHTEST', "
                f"SECRET '{SECRET}', ENDPOINT '127.0.0.1:{s3.port}', URL_STYLE 'path', USE_SSL false)")
    con.close()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name)
    with open_store(f"s3://{BUCKET}/persisted", catalog=str(tmp_path / "catalog.sqlite")) as st:
        run_id = st.create_run("p", {}, seed=0)
        st.write_step(SyntheticRun(run_id, SMALL, seed=0).step(0))  # its rollouts' file, through the user's secret
        assert st.count_rollouts(run_id) == 16
    assert any(k.startswith("persisted/main/rollouts/") for k in _keys(s3, "persisted/"))
    assert _holds_secret(tmp_path / "catalog.sqlite") == []


def test_bad_locations_are_refused_in_one_line(s3, tmp_path, monkeypatch):
    monkeypatch.delenv("WORKBENCH_CATALOG", raising=False)
    for spec, words in ((f"s3://{BUCKET}", "not the bucket's root"), (f"s3://{BUCKET}/", "not the bucket's root"),
                        ("s3://No_Such/x", "not a bucket name"), (f"s3://{BUCKET}/x", "needs a catalog")):
        with pytest.raises(StoreError) as err:
            open_store(spec)
        assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(StoreError) as err:  # a bucket that does not exist: DuckDB's error, no secret
        open_store("s3://missing-bucket/x", catalog=str(tmp_path / "c.sqlite"))
    assert SECRET not in str(err.value) and "missing-bucket" in str(err.value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET + "x")  # wrong key: refused, the key not echoed
    monkeypatch.setenv("WORKBENCH_S3_URL_STYLE", "sideways")
    with pytest.raises(StoreError, match="WORKBENCH_S3_URL_STYLE 'sideways'"):
        open_store(f"s3://{BUCKET}/y", catalog=str(tmp_path / "c.sqlite"))


def test_the_readers_threads_on_object_storage_follow_the_variable(s3, tmp_path, monkeypatch):
    from workbench.store.objectstore import s3_threads

    assert s3_threads({}) is None and s3_threads({"WORKBENCH_S3_THREADS": "16"}) == 16
    for bad in ("0", "65", "many"):
        with pytest.raises(StoreError, match=f"WORKBENCH_S3_THREADS '{bad}': must be an integer from 1 to 64"):
            s3_threads({"WORKBENCH_S3_THREADS": bad})
    monkeypatch.setenv("WORKBENCH_S3_THREADS", "5")
    with open_store(f"s3://{BUCKET}/threads", catalog=str(tmp_path / "t.sqlite")) as store:
        assert store.sql("SELECT current_setting('threads') AS n")["n"][0] == 5
    with open_store(f"s3://{BUCKET}/threads", catalog=str(tmp_path / "t.sqlite"), threads=1) as store:
        assert store.sql("SELECT current_setting('threads') AS n")["n"][0] == 1  # the caller's own wins


def test_console_reads_the_store_and_nothing_else(s3, tmp_path):
    catalog = tmp_path / "catalog.sqlite"
    s3.make_bucket("other-bucket")
    s3.client().put_object(Bucket="other-bucket", Key="x/a.csv", Body=b"a\n1\n")
    (tmp_path / "local.csv").write_text("a\n1\n")
    with open_store(f"s3://{BUCKET}/console", catalog=str(catalog)) as st:
        run_id = st.create_run("c", {}, seed=0)
        st.write_step(SyntheticRun(run_id, SMALL, seed=0).step(0))
        compact(st, older_than_s=0)  # every table in Parquet files on the bucket
        assert int(st.sql("SELECT count(*) AS n FROM rollouts")["n"][0]) == 16
        for query in ("SELECT * FROM 's3://other-bucket/x/a.csv'", "SELECT * FROM read_csv('s3://other-bucket/x/a.csv')",
                      f"SELECT * FROM '{tmp_path / 'local.csv'}'", "SELECT * FROM duckdb_secrets()"):
            with pytest.raises(StoreError, match="refused"):
                st.sql(query)
        st.sql("SELECT 1")  # the locked-down connection exists now; past the statement check, DuckDB refuses too
        for path in ("s3://other-bucket/x/a.csv", str(tmp_path / "local.csv")):
            with pytest.raises(StoreError, match="outside the store|refused|disabled"):
                st._ro.read(f"SELECT * FROM read_csv('{path}')")


def test_store_commands_and_the_dashboard_data_module(s3, tmp_path, monkeypatch):
    from workbench.cli import app

    catalog = tmp_path / "catalog.sqlite"
    url = f"s3://{BUCKET}/cli"
    with open_store(url, catalog=str(catalog)) as st:
        run_id = st.create_run("cli", {}, seed=0)
        syn = SyntheticRun(run_id, SMALL, seed=0)
        for step in range(3):
            st.write_step(syn.step(step))
    monkeypatch.delenv("WORKBENCH_CATALOG", raising=False)
    runner = CliRunner()
    base = ["--catalog", str(catalog)]
    out = runner.invoke(app, [*base, "query", "--store", url, "--format", "json", "SELECT count(*) AS n FROM rollouts"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)[0]["n"] == 48
    out = runner.invoke(app, [*base, "store", "compact", "--store", url, "--older-than-s", "0", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["after"]["snapshots"] == 1
    out = runner.invoke(app, [*base, "store", "info", "--store", url, "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["tables"]["rollouts"] == {"rows": 48, "files": 1, "bytes": pytest.approx(
        json.loads(out.output)["tables"]["rollouts"]["bytes"]), "delete_files": 0}
    verl = Path(__file__).parents[1] / "fixtures" / "verl" / "rollouts"  # an importer on the same store
    out = runner.invoke(app, [*base, "import", "verl", str(verl), "--store", url, "--json"])
    assert out.exit_code == 0, out.output
    imported = json.loads(out.output)
    assert imported["steps_imported"] >= 2 and imported["rollouts"] > 0
    again = runner.invoke(app, [*base, "import", "verl", str(verl), "--store", url, "--json"])
    assert again.exit_code == 0 and json.loads(again.output)["steps_imported"] == 0  # each step once
    monkeypatch.delenv("WORKBENCH_CATALOG", raising=False)  # (--catalog set it for this process)
    out = runner.invoke(app, ["query", "--store", url, "SELECT 1"])  # no catalog given: one line
    assert out.exit_code == 1 and "needs a catalog" in str(out.exception or out.output)

    import app.data as data

    monkeypatch.setenv("WORKBENCH_STORE", url)
    monkeypatch.setenv("WORKBENCH_CATALOG", str(catalog))
    data._open.clear()
    assert data.store_location() == url
    assert data.runs()["run_id"].to_list()[-1] == run_id or run_id in data.runs()["run_id"].to_list()
    assert data.runs().height == 2  # the engine-like run and the imported one
    assert data.steps((run_id,))["step"].to_list() == [0, 1, 2]


def test_engine_run_rollback_resume_and_guard_on_s3(s3, new_store, tmp_path, tiny_config):
    """The tiny organism run writes through the engine's group commit to the bucket; a crash after
    step 3 with the last checkpoint at step 2 resumes with the store rolled back (each step once);
    a guard's alert and its stop land in the same store."""
    local = new_store(tmp_path / "node")  # the node's folder: catalog, checkpoints, the organism link
    catalog = local / "catalog.sqlite"
    url = f"s3://{BUCKET}/engine"
    cfg = tiny_config(steps=4, eval__every=0)
    with open_store(url, catalog=str(catalog)) as st:
        assert st.handle.home == local  # the SQLite catalog's folder: checkpoints and the organism live there
        rid = run(cfg, store=st, stop_after=3)
        assert st.run(rid)["status"] == "stopped"
    ckpts = checkpoint_dir(local, rid)
    (ckpts / "step-000003.pt").unlink()
    assert latest_checkpoint(ckpts).name == "step-000002.pt"
    with open_store(url, catalog=str(catalog)) as st:
        resume(st, rid)
        assert st.run(rid)["status"] == "finished"
        assert st.run_steps(rid)["step"].to_list() == [1, 2, 3, 4]
        assert st.count_rollouts(rid) == 4 * 32
        stop = tiny_config(steps=3, eval__every=0, checkpoint__every=0,
                           guards=[{"name": "always", "rule": "rollout/count > 0", "window": 2, "action": "stop"}])
        gid = run(stop, store=st)
        assert st.run(gid)["status"] == "stopped" and st.alerts(gid)["guard"].to_list() == ["always"]
    assert any(k.startswith("engine/main/rollouts/") for k in _keys(s3, "engine/"))
    assert _holds_secret(local.resolve()) == []


def test_import_follow_on_s3(s3, tmp_path):
    """`import --follow`'s loop on an s3:// store: a step file that appears while it watches is
    imported once, into the bucket."""
    import shutil
    import threading

    from waiting import wait_until

    from workbench.integrations import importer
    from workbench.integrations.follow import follow

    verl = Path(__file__).parents[1] / "fixtures" / "verl" / "rollouts"
    dump = tmp_path / "rollouts"
    dump.mkdir()
    shutil.copy(verl / "1.jsonl", dump / "1.jsonl")
    with open_store(f"s3://{BUCKET}/follow", catalog=str(tmp_path / "catalog.sqlite")) as st:
        imp = importer(st, "verl", dump)
        assert imp.run_once().steps == [1]
        stop, imported = threading.Event(), []
        watcher = threading.Thread(target=lambda: imported.append(follow(imp, poll_s=0.1, stop=stop)))
        watcher.start()
        try:
            shutil.copy(verl / "2.jsonl", dump / "2.jsonl")
            wait_until(lambda: st.run_steps(imp.run_id)["step"].to_list() == [1, 2], 60, "step 2 imported")
        finally:
            stop.set()
            watcher.join()
        assert imported == [1] and st.run_steps(imp.run_id)["step"].to_list() == [1, 2]
    assert any(k.startswith("follow/main/rollouts/") for k in _keys(s3, "follow/"))


def _short(completions, **_):  # noqa: ANN001 - a TRL reward function: shorter is better
    return [1.0 / (1 + len(c)) for c in completions]


@pytest.mark.slow  # TRL's import and two GRPO steps: ~25 s of CPU
def test_trl_live_logger_on_s3(s3, organism_models, tmp_path, monkeypatch):
    """The TRL live logger given `store="s3://..."` (catalog from $WORKBENCH_CATALOG): every
    completion of a 2-step GRPO run lands once in the bucket's store; TRL's own output (and any
    checkpoint it saves) stays in its local output_dir."""
    pytest.importorskip("trl", reason="the trl extra is not installed")
    import contextlib
    import io

    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    from workbench.integrations import trl as wtrl
    from workbench.models import load_model
    from workbench.models.organism import ensure_organism, small_recipe
    from workbench.tasks import ArithmeticTask

    recipe = small_recipe()
    model, tokenizer = load_model(str(ensure_organism(organism_models, recipe)))
    data = Dataset.from_list([{"prompt": p.text, "answer": p.answer} for p in ArithmeticTask(recipe.task).train_prompts()])
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=4, max_steps=2, logging_steps=1, report_to="none", save_strategy="no",
                      use_cpu=True, bf16=False, use_vllm=False, beta=0.0, seed=0, disable_tqdm=True)
    torch.use_deterministic_algorithms(False)
    monkeypatch.setenv("WORKBENCH_CATALOG", str(tmp_path / "catalog.sqlite"))
    url = f"s3://{BUCKET}/trl"
    trainer = wtrl.WorkbenchGRPOTrainer(model=model, reward_funcs=[_short], args=args, train_dataset=data, processing_class=tokenizer, store=url,
                                        run_name="trl-s3")
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.train()
    with open_store(url, read_only=True) as st:
        rid = trainer.workbench_run_id
        assert st.run(rid)["status"] == "finished" and st.run(rid)["source"] == "trl"
        assert st.run_steps(rid)["step"].to_list() == [1, 2] and st.count_rollouts(rid) == 2 * 8
        assert st.location.data_path == f"{url}/"  # (8 rows a step stay inlined in the catalog until compact)
    assert _holds_secret(tmp_path) == []


def test_commands_and_launch_hand_the_url_and_catalog_on(tmp_path, monkeypatch):
    """What the CLI and the launcher give a child process for an s3:// store: the URL (not the folded
    `s3:/...` a Path makes of it), the catalog, and a local folder for logs and checkpoints."""
    from workbench.commands.common import store_handle, store_spec
    from workbench.control.launch import _store_spec, run_dir
    from workbench.store.connection import Location
    from workbench.store.handle import StoreHandle
    from workbench.store.objectstore import local_dir

    catalog = tmp_path / "node" / "catalog.sqlite"
    monkeypatch.setenv("WORKBENCH_CATALOG", str(catalog))
    folded = Path("s3://bucket-a/runs")  # what Typer's Path option makes of the URL
    assert str(folded) == "s3:/bucket-a/runs"
    assert store_spec(folded) == "s3://bucket-a/runs/" and store_handle(folded).home == catalog.parent
    assert store_handle(folded).spec == "s3://bucket-a/runs/" and store_handle(folded).catalog == f"sqlite:{catalog}"
    assert _store_spec("s3://bucket-a/runs") == ("s3://bucket-a/runs/", {})
    assert run_dir("s3://bucket-a/runs", "r1") == catalog.parent / "runs" / "r1"
    monkeypatch.setenv("WORKBENCH_CATALOG", "postgresql://wb:pw@db/workbench")
    monkeypatch.setenv("WORKBENCH_LOCAL_DIR", str(tmp_path / "work"))
    assert local_dir("s3://bucket-a/runs") == tmp_path / "work"

    class Opened:  # what the dashboard hands launch(): an open Store on a PostgreSQL catalog
        location = Location("postgres:dbname=wb host=db password=pw", "s3://bucket-a/runs/")
        handle = StoreHandle.of_location(location)  # as Store sets it

    assert run_dir(Opened(), "r2") == tmp_path / "work" / "runs" / "r2"
    assert _store_spec(Opened()) == ("s3://bucket-a/runs/", {"WORKBENCH_CATALOG": Opened.location.catalog})
    assert "pw" not in Opened.location.describe()
    monkeypatch.setenv("WORKBENCH_STORE", "s3://bucket-a/runs")
    from workbench.store import default_store_path

    assert str(default_store_path()) == "s3://bucket-a/runs"
