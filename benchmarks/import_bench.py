"""`workbench bench import`: write a large verl rollout dump (realistic text lengths) into a temporary
folder, import it into a fresh store, and report the rate and the split between parsing and writing.

Shape of the dump (defaults): 1,000,000 responses, 512 prompts x 8 responses per step (245 step files,
as `trainer.rollout_data_dir` holds them), prompt ~350 and response ~1,200 characters (log-normal,
sigma 0.5; words of a synthetic vocabulary), binary `score` with per-prompt pass rates drawn from
Beta(0.6, 0.6), `gts` and `acc` keys. The dump is written before the clock starts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def _texts(rng: np.random.Generator, count: int, mean_chars: int) -> list[str]:
    """`count` strings of about `mean_chars` characters (lowercase words and spaces), cut from one
    random buffer so that building a million of them takes seconds."""
    letters = np.frombuffer(b"etaoinshrdlucmfwypvbgkqjxz", dtype=np.uint8)
    size = 8_000_000
    buf = letters[rng.integers(0, len(letters), size=size)]
    buf[rng.random(size) < 0.17] = ord(" ")
    text = buf.tobytes().decode("ascii")
    mu = np.log(mean_chars) - 0.125
    lengths = np.clip(rng.lognormal(mu, 0.5, size=count), 8, size // 4).astype(np.int64)
    starts = rng.integers(0, size - lengths.max() - 1, size=count)
    return [text[s:s + n] for s, n in zip(starts.tolist(), lengths.tolist())]


def write_verl_dump(folder: Path, rollouts: int = 1_000_000, prompts_per_step: int = 512, group: int = 8,
                    prompt_chars: int = 350, response_chars: int = 1200, seed: int = 0) -> dict[str, Any]:
    """Write `{step}.jsonl` files as verl's `_dump_generations` does; returns the dump's shape."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    per_step = prompts_per_step * group
    steps = -(-rollouts // per_step)
    pool = 20_000
    prompts = _texts(rng, pool, prompt_chars)
    pass_rate = rng.beta(0.6, 0.6, size=pool)
    written, size = 0, 0
    for step in range(1, steps + 1):
        n = min(per_step, rollouts - written)
        k = -(-n // group)
        pids = np.repeat(rng.integers(0, pool, size=k), group)[:n]
        ok = rng.random(n) < pass_rate[pids]
        outs = _texts(rng, n, response_chars)
        lines = []
        for pid, out, good in zip(pids.tolist(), outs, ok.tolist()):
            lines.append(f'{{"input": "{prompts[pid]}", "output": "{out}", "gts": "{pid}", '
                         f'"score": {1.0 if good else 0.0}, "step": {step}, "acc": {"true" if good else "false"}}}')
        data = "\n".join(lines) + "\n"
        (folder / f"{step}.jsonl").write_text(data)
        written += n
        size += len(data)
    return {"steps": steps, "rollouts": written, "dump_bytes": size}


def _disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def bench_import(rollouts: int = 1_000_000, *, prompts_per_step: int = 512, group: int = 8,
                 response_chars: int = 1200, seed: int = 0, workdir: str | None = None) -> dict[str, Any]:
    """Generate the dump, import it (one run, fresh store), and measure."""
    from workbench.integrations.common import Importer
    from workbench.integrations import get_format
    from workbench.store import open_store

    tmp = Path(tempfile.mkdtemp(prefix="workbench-bench-import-", dir=workdir))
    try:
        t0 = time.perf_counter()
        shape = write_verl_dump(tmp / "rollouts", rollouts, prompts_per_step, group,
                                response_chars=response_chars, seed=seed)
        gen_s = time.perf_counter() - t0
        with open_store(tmp / "store") as store:
            t0 = time.perf_counter()
            imp = Importer(store, get_format("verl"), tmp / "rollouts", name="bench-import")
            report = imp.run_once()
            wall = time.perf_counter() - t0
            stored = store.count_rollouts(report.run_id)
        data_bytes = _disk_bytes(tmp / "store")
        return {
            "rollouts": report.rollouts, "stored_rollouts": stored, "steps": len(report.steps),
            "seconds": round(wall, 2), "rollouts_per_s": round(report.rollouts / wall, 1),
            "parse_s": round(report.parse_s, 2), "write_s": round(report.write_s, 2),
            "parse_share": round(report.parse_s / wall, 3), "write_share": round(report.write_s / wall, 3),
            "guards_s": round(report.guards_s, 3), "guards_share": round(report.guards_s / wall, 3),
            "cpu_s": round(report.cpu_s, 2),
            "rollouts_per_cpu_s": round(report.rollouts / max(report.cpu_s, 1e-9), 1),
            "load_avg_1m": round(os.getloadavg()[0], 1), "cores": os.cpu_count(),
            "bytes_per_rollout": round(data_bytes / max(report.rollouts, 1), 1),
            "dump_bytes_per_rollout": round(shape["dump_bytes"] / max(shape["rollouts"], 1), 1),
            "generate_dump_s": round(gen_s, 2),
            "shape": {"prompts_per_step": prompts_per_step, "group": group, "response_chars": response_chars},
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
