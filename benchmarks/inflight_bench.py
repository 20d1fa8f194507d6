"""What the rollouts-in-flight channel costs a run, and how far behind the engine it shows
(`workbench bench inflight`; the channel: workbench/store/inflight.py).

Three measurements, each side by side in one process so that the machine's load hits both sides alike:

1. **Runs**: the tiny organism run (`benchmarks.tiny.tiny_run`) with `logging.inflight_s` on (the
   default 0.5 s) and off (0), alternated `rounds` times, each run in a fresh store; the median step
   time (`timing_s/step`, the first 2 steps of each run left out) per side and their ratio.
2. **Batches**: the run's own backend (built by `build_setup`, so the organism, its tokenizer and the
   channel the engine attaches) generates the same seeded batch with the channel and without it,
   alternated `repeats` times: the median generate time per side, their ratio, that the tokens are the
   same, and the channel's own time (`InflightChannel.spent_s`: reading the tensors, decoding the rows
   shown, writing the file) as a share of the generate time: the cost with the machine's noise taken out.
3. **Lag**: a reader polls the file every `poll_s` seconds (as the Live page does, every 1 s) while the
   backend generates long batches (`--model random`: a random Llama over the organism's tokenizer,
   with no EOS, so each batch decodes every one of `--tokens`): the age of what it reads
   while a batch is generating (p50, max). What the page shows lags the engine by at most the age
   plus the page's refresh.

    workbench bench inflight --json
    workbench bench inflight --model random --tokens 256 --json

Read `run_step_ratio_on_vs_off` (the run's cost; within noise of 1.0 at these step times),
`run.channel_share_of_step` and `batch.channel_share` (the cost without the noise: the channel's own
time per batch over a step of the run, and over the batch) and `lag.max_age_s`.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
from pathlib import Path
from typing import Any

WARMUP_STEPS = 2


def _one_run(on: bool, steps: int, models: Path, every_s: float) -> list[float]:
    """Step times (s) of one tiny run, the first WARMUP_STEPS left out."""
    from benchmarks.tiny import tiny_run
    from workbench.engine import run

    root = Path(tempfile.mkdtemp(prefix="workbench-inflight-"))
    try:
        (root / "models").symlink_to(models)
        cfg = tiny_run({"name": f"inflight-{'on' if on else 'off'}", "steps": steps, "eval.every": 0,
                        "eval.at_start": False, "checkpoint.every": 0, "logging.inflight_s": every_s if on else 0})
        marks: list[float] = []
        run(cfg, store=str(root), on_step=lambda s, m: marks.append(m["timing_s/step"]) if s else None)
        return marks[WARMUP_STEPS:]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _setup(root: Path, models: Path, every_s: float, tokens: int, model: str, hidden: int):
    """The tiny run's parts (organism, tokenizer, backend with its channel) in a store at `root`, and the
    backend to time: the run's own, or with `model="random"` one over a random Llama on the organism's
    tokenizer (the same channel)."""
    from benchmarks.tiny import tiny_run
    from workbench.engine.setup import build_setup

    (root / "models").symlink_to(models)
    cfg = tiny_run({"name": "inflight-batches", "logging.inflight_s": every_s, "sampling.max_new_tokens": tokens})
    s = build_setup(cfg, store_dir=root, run_id="inflight-bench")
    backend = s.backend
    if model == "random":
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        from workbench.rollout.hf import HFBackend

        torch.manual_seed(0)
        llama = LlamaForCausalLM(LlamaConfig(
            vocab_size=len(s.tokenizer), hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=4096,
            tie_word_embeddings=False)).eval()
        # no EOS (-1 is no token id): every row decodes all its tokens, the long batches the lag needs
        backend = HFBackend(llama, s.tokenizer, "cpu", eos_token_ids=[-1], pad_token_id=backend.pad_token_id)
        backend.progress = s.backend.progress
    return s, backend


def _batches(s: Any, backend: Any, rows: int, tokens: int, repeats: int, poll_s: float) -> dict[str, Any]:
    """Side by side generate times with and without the channel, and the ages a reader saw."""
    from workbench.rollout.base import SamplingParams
    from workbench.store.inflight import read_inflight, stepping

    channel = backend.progress
    prompts = [s.prompts.train_tok[i % len(s.prompts.train_tok)] for i in range(rows)]
    seeds = [1000 + i // 4 for i in range(rows)]  # groups of 4, as the tiny run's
    sampling = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=tokens)
    ages: list[float] = []
    done = threading.Event()

    def reader() -> None:
        while not done.wait(poll_s):
            report = read_inflight(channel.path.parents[2], "inflight-bench")
            if report.row is not None and report.row["state"] == "generating":
                ages.append(report.age_s)

    times: dict[bool, list[float]] = {True: [], False: []}
    first: dict[bool, Any] = {}
    spent = 0.0
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        for k in range(repeats + 1):  # the first round warms up, untimed
            for on in (True, False) if k % 2 == 0 else (False, True):
                backend.progress = channel if on else None
                before = channel.spent_s
                with stepping(backend, k):
                    batch = backend.generate(prompts, sampling, seeds=seeds)
                first.setdefault(on, batch.tokens)
                if k:
                    times[on].append(batch.gen_time_s)
                    spent += channel.spent_s - before if on else 0.0
    finally:
        done.set()
        thread.join()
    on_s, off_s = statistics.median(times[True]), statistics.median(times[False])
    return {"rows": rows, "max_new_tokens": tokens, "repeats": repeats, "median_on_s": on_s, "median_off_s": off_s,
            "ratio_on_vs_off": on_s / off_s, "same_tokens": bool((first[True] == first[False]).all()),
            "tokens_per_batch": int((batch.lengths).sum()), "writes": channel.writes,
            "channel_share": spent / sum(times[True]), "channel_ms_per_write": 1000 * channel.spent_s / channel.writes,
            "channel_ms_per_batch": 1000 * spent / len(times[True]),
            "ages": ages}


def bench_inflight(*, steps: int = 16, rounds: int = 4, rows: int = 32, tokens: int = 8, repeats: int = 20,
                   every_s: float = 0.5, model: str = "organism", hidden: int = 256, poll_s: float = 1.0,
                   runs: bool = True) -> dict[str, Any]:
    """The figures of `workbench bench inflight` (see the module docstring)."""
    import os

    from benchmarks.tiny import small_organism_models
    from workbench.store.inflight import PAGE_REFRESH_S

    models = small_organism_models()
    out: dict[str, Any] = {"load_1m": os.getloadavg()[0], "cpus": os.cpu_count(), "every_s": every_s}
    if runs:
        sides: dict[bool, list[float]] = {True: [], False: []}
        for k in range(rounds):
            for on in (True, False) if k % 2 == 0 else (False, True):
                sides[on] += _one_run(on, steps, models, every_s)
        out["run"] = {"median_step_on_s": statistics.median(sides[True]),
                      "median_step_off_s": statistics.median(sides[False]), "steps_timed_per_side": len(sides[True]),
                      "steps_per_run": steps, "rounds": rounds}
        out["run_step_ratio_on_vs_off"] = out["run"]["median_step_on_s"] / out["run"]["median_step_off_s"]
    root = Path(tempfile.mkdtemp(prefix="workbench-inflight-"))
    try:
        s, backend = _setup(root, models, every_s, tokens, model, hidden)
        batch = _batches(s, backend, rows, tokens, repeats, poll_s)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ages = sorted(batch.pop("ages"))
    out["batch"] = dict(batch, model=model)
    if runs:  # the channel's own time per batch over a step of the run (one batch per step: one stage)
        out["run"]["channel_share_of_step"] = batch["channel_ms_per_batch"] / 1000 / out["run"]["median_step_on_s"]
    out["lag"] = {"reads_while_generating": len(ages), "poll_s": poll_s,
                  "p50_age_s": statistics.median(ages) if ages else None, "max_age_s": ages[-1] if ages else None,
                  "page_refresh_s": PAGE_REFRESH_S,
                  "worst_shown_lag_s": ages[-1] + PAGE_REFRESH_S if ages else None}
    return out
