"""Does an idle local Ray runtime slow the in-process engine? In-process runs of the default experiment
alternate with a local Ray runtime up (idle) and down; prints the median step wall time of each side.
    .venv/bin/python dev/ray_idle.py [STEPS]"""
import json, statistics, sys
from pathlib import Path
import ray
from benchmarks.engine_bench import _base_config, _temp_store, _timed_run
from workbench.rollout.ray_backend import start_local_ray
from workbench.commands.common import store_path

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
over = ["eval.at_start=false", "eval.every=0", "checkpoint.every=0", f"steps={steps + 3}"]
cfg = _base_config(over)
res = {"ray_down": [], "ray_up": []}
with _temp_store(Path(store_path(None)), cfg) as store:
    for r in range(3):
        res["ray_down"] += [m["wall_s"] for m in _timed_run(cfg, store)]
        start_local_ray(attempts=5, num_cpus=2)
        res["ray_up"] += [m["wall_s"] for m in _timed_run(cfg, store)]
        ray.shutdown()
out = {k: statistics.median(v) for k, v in res.items()}
out["up_vs_down"] = out["ray_down"] / out["ray_up"]
print(json.dumps(out))
