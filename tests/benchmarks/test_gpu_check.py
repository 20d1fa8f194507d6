"""dev/gpu-check.sh: the model it builds, the report's completeness rules, a section that breaks, and the
whole check rehearsed in a fresh virtual environment holding only the GPU machine's packages."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from benchmarks.gpu_check import SECTIONS, _run_one, problems

ROOT = Path(__file__).resolve().parents[2]


def test_qwen2_like_config_has_half_a_billion_parameters():
    from benchmarks.gpu_model import count_parameters_meta, qwen2_like_config

    cfg = qwen2_like_config()
    assert cfg.model_type == "qwen2" and cfg.num_key_value_heads == 2 and cfg.tie_word_embeddings
    assert count_parameters_meta(cfg) == 494_032_768  # Qwen2.5-0.5B's shape


def test_wide_tokenizer_decodes_any_id_encodes_like_the_organism_and_has_a_chat_template():
    from benchmarks.gpu_model import wide_char_tokenizer
    from workbench.models.tokenizer import build_char_tokenizer

    wide, small = wide_char_tokenizer(1000), build_char_tokenizer()
    assert wide("12+7")["input_ids"] == small("12+7")["input_ids"]
    assert wide.decode([5, 999]) == "1<t999>"
    text = wide.apply_chat_template([{"role": "user", "content": "12+7"}], tokenize=False, add_generation_prompt=True)
    assert text == "12+7="


def _report(**sections):
    full = {name: {"status": "skipped", "reason": "no CUDA"} for name in SECTIONS}
    full.update(organism_cpu={"status": "ok"}, gpu_tests={"status": "ok"})
    full.update(sections)
    return {"environment": {"python": "3.12", "cuda": False, "packages": {}}, "sections": full}


def test_completeness_rules():
    assert problems(_report(), cuda=False) == []
    assert problems(None) == ["no sections"]
    broken = _report(gpu_tests={"status": "failed"})
    assert problems(broken) == ["gpu_tests: failed without a reason"]
    missing = _report()
    del missing["sections"]["vllm_qwen05b"]
    assert problems(missing) == ["vllm_qwen05b: missing or without a status"]
    assert problems(_report(organism_cuda={"status": "failed", "reason": "OOM"}), cuda=False) == [
        "organism_cuda: expected skipped for lack of CUDA, got failed: OOM"]


def test_a_section_past_its_limit_is_recorded_as_failed(tmp_path):
    got = _run_one("organism_cpu", tmp_path, rehearse=True, limit_s=0.5)
    assert got["status"] == "failed" and got["reason"] == "stopped at its 0 s limit"


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_rehearsal_in_the_gpu_machines_package_set(tmp_path):
    """`dev/gpu-check.sh --rehearse`: a venv with only torch (CPU), transformers, accelerate, pyarrow and
    the carried wheels (fetched through pip on first use) runs the whole check from the source tree; the
    CUDA parts say `skipped: no CUDA`, the CPU reference and the GPU tests' collection run, and the
    report is complete."""
    report = tmp_path / "report.json"
    env = dict(os.environ, GPU_REHEARSAL_REPORT=str(report), GPU_CHECK_LIMIT_S="1200")
    env.pop("PYTHONPATH", None)
    out = subprocess.run(["bash", "dev/gpu-check.sh", "--rehearse"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=1700)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(report.read_text())
    assert problems(data, cuda=False) == []
    assert data["environment"]["packages"]["vllm"] is None and data["environment"]["packages"]["duckdb"] == "1.5.5"
    assert data["sections"]["organism_cpu"]["rollouts_per_s"] > 0
    assert "passed" in data["sections"]["gpu_tests"]["summary"] or "skipped" in data["sections"]["gpu_tests"]["summary"]
    assert data["sections"]["qwen05b_cuda"]["reason"].startswith("no CUDA (rehearsed on the CPU: {\"steps_per_s\"")
