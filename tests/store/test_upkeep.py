"""The writer's periodic upkeep: every `upkeep_every` steps small files are merged; the rows are
unchanged and a failed upkeep never fails the step that triggered it."""

from __future__ import annotations

import logging

import pytest

from workbench.errors import StoreError
from workbench.store import maintenance, open_store
from workbench.store.maintenance import info
from workbench.store.synthetic import SyntheticRun
from tests.store.conftest import SMALL


def _files(store, table: str) -> int:
    return info(store)["tables"][table]["files"]


def _rows(store, run_id):
    return store.rollouts(run_id, limit=10_000).drop("token_entropy").to_dicts()


def test_small_files_are_merged_every_n_steps(tmp_path):
    with open_store(tmp_path / "off", upkeep_every=0) as off, open_store(tmp_path / "on", upkeep_every=4) as on:
        ids = {}
        for name, store in (("off", off), ("on", on)):
            run_id = ids[name] = store.create_run(name, {}, seed=0)
            syn = SyntheticRun(run_id, SMALL, seed=3)
            for step in range(9):
                store.write_step(syn.step(step))
        assert _files(off, "rollouts") == 9
        assert _files(on, "rollouts") <= 2  # steps 0-7 merged into one file, step 8 on its own
        assert _files(on, "allocations") <= 2
        want, got = _rows(off, ids["off"]), _rows(on, ids["on"])
        assert [{**r, "run_id": None} for r in got] == [{**r, "run_id": None} for r in want]
        assert on.run_steps(ids["on"])["step"].to_list() == list(range(9))


def test_a_failed_upkeep_is_logged_and_the_step_kept(tmp_path, monkeypatch, caplog):
    def broken(store, **_kw):
        raise StoreError("merge failed on purpose")

    monkeypatch.setattr(maintenance, "upkeep", broken)
    with open_store(tmp_path / "s", upkeep_every=1) as store:
        run_id = store.create_run("r", {}, seed=0)
        syn = SyntheticRun(run_id, SMALL, seed=3)
        with caplog.at_level(logging.WARNING, logger="workbench.store.writer"):
            store.write_step(syn.step(0))
        assert "merge failed on purpose" in caplog.text
        assert store.run_steps(run_id)["step"].to_list() == [0]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
def test_bad_upkeep_every_is_refused(tmp_path, bad):
    with pytest.raises(StoreError, match="upkeep_every"):
        open_store(tmp_path / "s", upkeep_every=bad)


def test_a_moved_store_directory_opens_and_takes_writes(tmp_path):
    """A store directory copied or moved elsewhere (another disk, a laptop) keeps working: its data
    is always <root>/data, whatever path the catalog recorded when it was created."""
    import shutil

    with open_store(tmp_path / "here") as store:
        run_id = store.create_run("r", {}, seed=0)
        syn = SyntheticRun(run_id, SMALL, seed=3)
        store.write_step(syn.step(0))
    shutil.move(str(tmp_path / "here"), str(tmp_path / "there"))
    with open_store(tmp_path / "there", read_only=True) as store:
        assert store.count_rollouts(run_id) == 16 and store.rollouts(run_id, limit=3).height == 3
    with open_store(tmp_path / "there") as store:
        store.write_step(syn.step(1))
        assert store.run_steps(run_id)["step"].to_list() == [0, 1]
    assert list((tmp_path / "there" / "data").rglob("*.parquet"))
