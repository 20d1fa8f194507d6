"""dev/gpu-check.sh's CPU-safe parts: it fails fast and clearly without CUDA, and the random
Qwen2-like model it builds has ~0.5B parameters (counted on the meta device, no memory for weights)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def test_qwen2_like_config_has_half_a_billion_parameters():
    from workbench.experiments.engine_bench import count_parameters_meta, qwen2_like_config

    cfg = qwen2_like_config()
    assert cfg.model_type == "qwen2" and cfg.num_key_value_heads == 2 and cfg.tie_word_embeddings
    assert count_parameters_meta(cfg) == 494_032_768  # Qwen2.5-0.5B's shape


def test_wide_tokenizer_decodes_any_id_and_encodes_like_the_organism():
    from workbench.experiments.engine_bench import _wide_char_tokenizer
    from workbench.models.tokenizer import build_char_tokenizer

    wide, small = _wide_char_tokenizer(1000), build_char_tokenizer()
    assert wide("12+7=")["input_ids"] == small("12+7=")["input_ids"]
    assert wide.decode([5, 999]) == "1<t999>"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_gpu_check_fails_fast_without_cuda():
    env = dict(os.environ, PYTHON=sys.executable)
    out = subprocess.run(["bash", "dev/gpu-check.sh", "no-such-wheels"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a CUDA GPU" in lines[0] and "nothing was run" in lines[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_gpu_check_function_names_the_missing_gpu():
    from workbench.errors import WorkbenchError
    from workbench.experiments.engine_bench import gpu_check

    with pytest.raises(WorkbenchError, match="needs a CUDA GPU"):
        gpu_check()
