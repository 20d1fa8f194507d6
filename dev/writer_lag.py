"""Visibility lag of the engine's steps with `store.writer_nice = N`: the default experiment for STEPS
steps while a reader in another process polls the store's max(step) every 50 ms; prints wall time and
lag p50 / p95 / max.
    .venv/bin/python dev/writer_lag.py N [STEPS]"""
import json, statistics, subprocess, sys, time
from pathlib import Path
from benchmarks.engine_bench import _base_config, _temp_store
from workbench.commands.common import store_path
from workbench.engine import run

POLL = r'''
import sys, time, json
from workbench.store import open_store
root, out = sys.argv[1], sys.argv[2]
seen = {}
deadline = time.time() + 600
while time.time() < deadline:
    try:
        with open_store(root, read_only=True) as st:
            while time.time() < deadline:
                r = st._lake.read("SELECT max(step) AS s FROM steps")["s"][0]
                now = time.time()
                if r is not None:
                    for k in range(int(r) + 1):
                        seen.setdefault(k, now)
                    open(out, "w").write(json.dumps(seen))
                time.sleep(0.05)
    except Exception:
        time.sleep(0.2)
'''
nice = int(sys.argv[1]); steps = int(sys.argv[2]) if len(sys.argv) > 2 else 60
cfg = _base_config(["eval.at_start=false", "eval.every=0", "checkpoint.every=0", f"steps={steps}",
                    f"store.writer_nice={nice}"])
ended = {}
with _temp_store(Path(store_path(None)), cfg) as root:
    out = root / "seen.json"
    p = subprocess.Popen([sys.executable, "-c", POLL, str(root), str(out)])
    t0 = time.perf_counter()
    run(cfg, store=str(root), store_dir=root, on_step=lambda s, m: ended.__setitem__(s, time.time()))
    wall = time.perf_counter() - t0
    time.sleep(1.5); p.kill()
    seen = {int(k): v for k, v in json.loads(out.read_text()).items()}
lags = sorted(seen[k] - ended[k] for k in ended if k in seen and k > 2)
print(json.dumps({"nice": nice, "steps": steps, "wall_s": round(wall, 2), "lag_p50": round(statistics.median(lags), 3),
                  "lag_p95": round(lags[int(0.95 * (len(lags) - 1))], 3), "lag_max": round(lags[-1], 3), "n": len(lags)}))
