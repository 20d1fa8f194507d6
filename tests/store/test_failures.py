"""Broken stores: each failure is one clear StoreError naming the path; other runs stay readable."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from workbench.errors import StoreError
from workbench.store import open_store
from workbench.store.synthetic import SyntheticRun
from tests.store.conftest import SMALL


def _two_runs(path: Path) -> tuple[str, str]:
    with open_store(path) as store:
        runs = [store.create_run(n, {}, seed=0) for n in ("a", "b")]
        for run_id in runs:
            store.write_step(SyntheticRun(run_id, SMALL).step(0))
    return runs[0], runs[1]


def _file_of(path: Path, run_id: str) -> Path:
    for f in (path / "data").rglob("*.parquet"):
        if run_id in pq.read_table(f, columns=["run_id"]).column("run_id").to_pylist():
            return f
    raise AssertionError(f"no data file for {run_id}")


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_damaged_data_file_named_and_other_runs_readable(tmp_path, damage):
    path = tmp_path / "store"
    a, b = _two_runs(path)
    victim = _file_of(path, a)
    if damage == "missing":
        victim.unlink()
    else:
        victim.write_bytes(b"not a parquet file" * 10)
    with open_store(path) as store:
        with pytest.raises(StoreError) as err:
            store.rollouts(a)
        assert str(victim) in str(err.value) and "\n" not in str(err.value)
        assert store.count_rollouts(b) == 16  # the other run's file is never opened
        assert store.rollouts(b).height == 16
        assert store.run_steps([a, b]).height == 2  # the small tables live in the catalog


def test_store_path_is_a_regular_file(tmp_path):
    f = tmp_path / "store"
    f.write_text("hello")
    with pytest.raises(StoreError, match=f"store path {f} is a regular file"):
        open_store(f)


def test_missing_store_read_only(tmp_path):
    with pytest.raises(StoreError, match=str(tmp_path / "nope")):
        open_store(tmp_path / "nope", read_only=True)


def test_corrupt_catalog_named(tmp_path):
    path = tmp_path / "store"
    path.mkdir()
    (path / "catalog.sqlite").write_bytes(b"garbage" * 1000)
    with pytest.raises(StoreError, match=str(path / "catalog.sqlite")):
        open_store(path)


def _unprivileged() -> list[str] | None:
    if os.geteuid() != 0:
        return []
    for tool in ("/usr/bin/setpriv", "/bin/setpriv"):
        if os.path.exists(tool):
            return [tool, "--reuid=65534", "--regid=65534", "--clear-groups"]
    return None


def test_unwritable_store_directory():
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("running as root without setpriv: cannot make a directory unwritable")
    root = Path(tempfile.mkdtemp(prefix="workbench-ro-"))
    try:
        store = root / "store"
        store.mkdir()
        os.chmod(root, 0o755)
        os.chmod(store, 0o555)
        code = ("from workbench.store import open_store\nfrom workbench.errors import StoreError\n"
                f"try:\n    open_store({str(store)!r})\nexcept StoreError as e:\n    print(e)\n")
        repo = str(Path(__file__).parents[2])
        out = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120, cwd="/", env={**os.environ, "PYTHONPATH": repo, "HOME": "/tmp"})
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip() == f"store directory {store} is not writable: Permission denied"
    finally:
        os.chmod(root / "store", 0o755)
        import shutil
        shutil.rmtree(root, ignore_errors=True)
