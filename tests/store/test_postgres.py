"""A PostgreSQL catalog goes through the same code: a real server started in a temp dir.

Skipped when PostgreSQL's server binaries are not installed. When the tests run as root (CI), the
server runs as the `postgres` user (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from workbench.store import open_store
from workbench.store.synthetic import SyntheticRun
from tests.store.conftest import SMALL

BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres():
    if not BIN or not os.path.exists(os.path.join(BIN[-1], "initdb")):
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    bindir = BIN[-1]
    prefix: list[str] = []
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server as")
        prefix = ["setpriv", f"--reuid={owner.pw_uid}", f"--regid={owner.pw_gid}", "--clear-groups"]
    root = Path(tempfile.mkdtemp(prefix="workbench-pg-"))
    os.chmod(root, 0o755)
    data, sock = root / "pgdata", root / "sock"
    sock.mkdir()
    if owner is not None:
        os.chown(sock, owner.pw_uid, owner.pw_gid)
        os.chown(root, owner.pw_uid, owner.pw_gid)
    port = _free_port()
    env = {**os.environ, "LC_ALL": "C"}

    def run(*cmd: str) -> None:
        out = subprocess.run([*prefix, *cmd], capture_output=True, text=True, env=env, cwd="/", timeout=120)
        assert out.returncode == 0, f"{cmd[0]} failed: {out.stdout[-1500:]}{out.stderr[-1500:]}"

    run(f"{bindir}/initdb", "-D", str(data), "-A", "trust", "-U", "wb", "--no-sync")
    run(f"{bindir}/pg_ctl", "-D", str(data), "-w", "-l", str(root / "log"), "-o",
        f"-k {sock} -p {port} -c listen_addresses='' -c fsync=off", "start")
    try:
        run(f"{bindir}/createdb", "-h", str(sock), "-p", str(port), "-U", "wb", "workbench")
        yield f"postgres:dbname=workbench host={sock} port={port} user=wb"
    finally:
        subprocess.run([*prefix, f"{bindir}/pg_ctl", "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, cwd="/", timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def test_postgres_catalog_round_trip(postgres, tmp_path):
    data_path = str(tmp_path / "data")
    with open_store(catalog=postgres, data_path=data_path) as store:
        run_id = store.create_run("pg", {"k": 1}, seed=0)
        syn = SyntheticRun(run_id, SMALL)
        for step in range(2):
            store.write_step(syn.step(step))
        control = store.add_control(run_id, "pause", {})
        store.resolve_control(control, "applied", step=1)
        store.rollback_run(run_id, 0)
    with open_store(catalog=postgres, data_path=data_path, read_only=True) as store:
        assert store.run(run_id)["config"] == {"k": 1}
        assert store.run_steps(run_id)["step"].to_list() == [0]
        assert store.count_rollouts(run_id) == 16
        assert store.controls(run_id)["status"].to_list() == ["applied"]
        assert store.sql("SELECT count(*) AS n FROM allocations")["n"][0] == 4
    assert list(Path(data_path).rglob("*.parquet"))
