"""Two Ray nodes on one machine (`ray.cluster_utils.Cluster`): rollout workers land on both nodes and
give the in-process rollouts, and runs on different nodes write one store through a PostgreSQL
catalog and a shared data path (the two-node recipe of docs/engine.md)."""

from __future__ import annotations

import pytest
import torch

from workbench.rollout.base import SamplingParams
from workbench.rollout.hf import HFBackend

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    node = dict(num_cpus=1, object_store_memory=128 * 2**20)
    for attempt in range(3):  # a node that misses Ray's fixed 30 s start-up deadline on a busy machine
        try:
            c = Cluster(initialize_head=True, head_node_args=dict(node, include_dashboard=False))
            c.add_node(**node)
            break
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for this
            if "timed out during startup" not in str(exc) or attempt == 2:
                raise
            ray.shutdown()
    ray.init(address=c.address, log_to_driver=False, configure_logging=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


def _nodes() -> list[str]:
    return sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])


def test_workers_spread_over_both_nodes(cluster, model, tokenizer, prompts):
    from workbench.rollout.ray_backend import RayBackend, RayOptions

    backend = RayBackend(model, HFBackend(model, tokenizer),
                         RayOptions(workers=2, worker_cpus=1, address="auto", start_timeout_s=300))
    try:
        assert sorted(i["node"] for i in backend.info.values()) == _nodes()  # one worker per node
        rows = [p for p in prompts for _ in range(3)]
        seeds = [i // 3 for i in range(len(rows))]
        sampling = SamplingParams(max_new_tokens=8)
        got = backend.generate(rows, sampling, seeds=seeds)
        assert torch.equal(got.tokens, HFBackend(model, tokenizer).generate(rows, sampling, seeds=seeds).tokens)
    finally:
        backend.close()


@ray.remote(num_cpus=1)
def _train_on_this_node(catalog: str, data_path: str, store_dir: str, config: dict) -> tuple[str, str]:
    from workbench.config import RunConfig
    from workbench.engine import run
    from workbench.store import open_store

    with open_store(catalog=catalog, data_path=data_path) as store:
        store.handle = store.handle.at_home(store_dir)  # a shared catalog: this node's folder for the run
        run_id = run(RunConfig.from_dict(config), store=store)
    return run_id, ray.get_runtime_context().get_node_id()


def test_runs_on_two_nodes_write_one_store(cluster, postgres, organism_store, tiny_config, tmp_path):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from workbench.store import open_store

    data_path = str(tmp_path / "shared-data")  # the path every node sees (a shared mount in practice)
    with open_store(catalog=postgres, data_path=data_path):
        pass  # create the store once: two writers creating a new catalog at the same moment collide
    nodes = _nodes()
    assert len(nodes) == 2
    refs = []
    for k, node in enumerate(nodes):
        local = tmp_path / f"node-{k}"  # each node's own directory: the model and its checkpoints
        local.mkdir()
        (local / "models").symlink_to(organism_store / "models")
        cfg = tiny_config(steps=2, seed=k, name=f"node-{k}", eval__every=0, checkpoint__every=0).to_dict()
        refs.append(_train_on_this_node.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                    .remote(postgres, data_path, str(local), cfg))
    results = ray.get(refs, timeout=900)
    assert sorted(node for _, node in results) == nodes  # one run per node
    with open_store(catalog=postgres, data_path=data_path) as store:
        runs = store.list_runs()
        for run_id, _ in results:
            assert runs.filter(runs["run_id"] == run_id)["status"].to_list() == ["finished"]
            assert store.run_steps(run_id)["step"].to_list() == [1, 2]
            assert store.count_rollouts(run_id) == 2 * 32
