"""A PostgreSQL catalog goes through the same code: a real server started in a temp dir.

Skipped when PostgreSQL's server binaries are not installed. When the tests run as root (CI), the
server runs as the `postgres` user (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workbench.store import open_store
from workbench.store.synthetic import SyntheticRun
from tests.store.conftest import SMALL

def test_postgres_catalog_round_trip(postgres, tmp_path):
    data_path = str(tmp_path / "data")
    with open_store(catalog=postgres, data_path=data_path) as store:
        run_id = store.create_run("pg", {"k": 1}, seed=0)
        syn = SyntheticRun(run_id, SMALL)
        for step in range(2):
            store.write_step(syn.step(step))
        control = store.add_control(run_id, "pause", {})
        store.resolve_control(control, "applied", step=1)
        seen = store.snapshot_id()
        store.rollback_run(run_id, 0)
        latest, changes = store.changes_since(seen)  # DuckLake's record of commits, on this catalog too
        assert latest == store.snapshot_id() and changes["steps"] == "change"
    with open_store(catalog=postgres, data_path=data_path, read_only=True) as store:
        assert store.run(run_id)["config"] == {"k": 1}
        assert store.run_steps(run_id)["step"].to_list() == [0]
        assert store.count_rollouts(run_id) == 16
        assert store.controls(run_id)["status"].to_list() == ["applied"]
        assert store.sql("SELECT count(*) AS n FROM allocations")["n"][0] == 4
    assert list(Path(data_path).rglob("*.parquet"))


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root hands the server to 'postgres'")
def test_a_server_place_its_user_cannot_reach_is_named(tmp_path):
    """As root the server runs as `postgres`; a data directory under a root-only folder gets one line
    naming that folder (initdb's own message was 'Permission denied' on a path deep inside)."""
    from workbench.errors import StoreError
    from workbench.store.pglocal import local_postgres, server_bin

    if server_bin() is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    with pytest.raises(StoreError, match=f"cannot reach .*{locked}"):
        with local_postgres(locked / "pg"):
            pass
