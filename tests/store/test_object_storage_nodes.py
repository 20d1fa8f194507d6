"""Two machines without a shared disk: a trainer "node" and a reader "node" are separate processes with
separate working folders and nothing in common but a PostgreSQL catalog and an S3 bucket (moto's
server). The trainer runs the tiny organism run into `s3://...`; the reader, started in its own empty
folder, reads it through `workbench query`, and leaves that folder empty. (The Ray rollout workers never
touch the store: they send their rollouts to the trainer, which alone writes.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.config_docs import to_toml
from workbench.store.s3local import local_s3

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # two CLI processes, one of them training (~30 s on a quiet 2-core machine)


def test_trainer_and_reader_share_only_the_catalog_and_the_bucket(postgres, organism_models, tmp_path, tiny_config):
    trainer, reader = tmp_path / "node-a", tmp_path / "node-b"
    trainer.mkdir()
    reader.mkdir()
    (trainer / "workbench-local").mkdir()  # the trainer's local folder (WORKBENCH_LOCAL_DIR's default)
    (trainer / "workbench-local" / "models").symlink_to(organism_models)
    config = trainer / "tiny.toml"
    config.write_text(to_toml(tiny_config(steps=3, eval__every=0)))
    with local_s3("wb-nodes", secret="nodesSecret0123456789", set_env=False) as s3:
        env = {**os.environ, **s3.env, "WORKBENCH_CATALOG": postgres, "PYTHONPATH": str(REPO),
               "OMP_NUM_THREADS": "1"}
        env.pop("WORKBENCH_STORE", None)
        env.pop("WORKBENCH_LOCAL_DIR", None)
        url = "s3://wb-nodes/team"
        train = subprocess.run([sys.executable, "-m", "workbench.cli", "run", str(config), "--store", url, "--quiet"],
                               cwd=trainer, env=env, capture_output=True, text=True, timeout=600)
        assert train.returncode == 0, train.stdout[-2000:] + train.stderr[-2000:]
        query = ("SELECT r.run_id, r.status, count(*) AS rollouts, count(DISTINCT o.step) AS steps "
                 "FROM runs r JOIN rollouts o USING (run_id) GROUP BY ALL")
        read = subprocess.run([sys.executable, "-m", "workbench.cli", "query", "--store", url, "--format", "json",
                               query], cwd=reader, env=env, capture_output=True, text=True, timeout=300)
        assert read.returncode == 0, read.stderr[-2000:]
        (row,) = json.loads(read.stdout)
        assert (row["status"], row["rollouts"], row["steps"]) == ("finished", 3 * 32, 3)
        assert any(o["Key"].startswith("team/main/rollouts/") for o in s3.objects("wb-nodes", "team/"))
    assert list(reader.iterdir()) == []  # the reader wrote nothing locally
    checkpoints = trainer / "workbench-local" / "runs" / row["run_id"] / "checkpoints"
    assert any(checkpoints.iterdir())  # the trainer's checkpoints stay on its own disk
