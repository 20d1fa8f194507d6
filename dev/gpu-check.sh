#!/usr/bin/env bash
# The engine on one CUDA GPU, checked in one go (no network needed). Usage, from the repository root:
#
#   dev/gpu-check.sh [WHEELS_DIR]      # default WHEELS_DIR: dev/wheels
#
# Needs: one CUDA GPU, Python with PyTorch (CUDA) and transformers already installed. The project's
# other needs are installed from the wheels in WHEELS_DIR (gathered beforehand on a machine with a
# network: see docs/engine.md, "The engine on a GPU"). Then it runs the GPU tests (`-m gpu`) and short
# engine runs on CUDA (the organism, and a random Qwen2-like ~0.5B model; vLLM too when importable),
# and prints one JSON document on stdout. It stops after 8 minutes at most; progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
WHEELS="${1:-dev/wheels}"
LIMIT_S="${GPU_CHECK_LIMIT_S:-480}"
start=$(date +%s)
left() { echo $(( LIMIT_S - ($(date +%s) - start) )); }
say() { echo "gpu-check: $*" >&2; }

# 1. Fail fast and clearly when there is no CUDA GPU (or no PyTorch).
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)" 2>/dev/null; then
  say "needs a CUDA GPU visible to PyTorch ($PY -c 'import torch; torch.cuda.is_available()' is not True); nothing was run"
  exit 2
fi

# 2. The project's other needs, offline, from the carried wheels (torch and transformers stay as they are).
if [ -d "$WHEELS" ]; then
  say "installing the project from $WHEELS (no index)"
  "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" -e ".[dev]" >&2 \
    || "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" -e . >&2
else
  say "no wheels folder $WHEELS: using what is installed"
fi
"$PY" -c "import workbench" || { say "the workbench package cannot be imported; gather the wheels first (docs/engine.md)"; exit 2; }

# 3. The GPU tests.
report="$(mktemp -d)"
say "running the GPU tests (-m gpu)"
set +e
timeout "$(( $(left) / 3 ))" "$PY" -m pytest -m gpu -q -p no:cacheprovider -o addopts="" tests > "$report/gpu-tests.txt" 2>&1
tests_rc=$?
set -e
tail -n 3 "$report/gpu-tests.txt" >&2

# 4. Short engine runs on CUDA, measured; JSON on stdout.
say "short engine runs on CUDA ($(left) s left)"
set +e
timeout "$(left)" "$PY" - "$tests_rc" "$report/gpu-tests.txt" <<'PYEOF'
import json, sys
from workbench.experiments.engine_bench import gpu_check
out = gpu_check()
lines = open(sys.argv[2]).read().strip().splitlines()
out["gpu_tests"] = {"exit_code": int(sys.argv[1]), "summary": lines[-1] if lines else ""}
print(json.dumps(out, indent=2, default=str))
PYEOF
rc=$?
set -e
[ "$rc" -eq 124 ] && say "stopped at the ${LIMIT_S} s limit"
exit "$rc"
