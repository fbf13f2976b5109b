#!/usr/bin/env bash
# The quick test tier across CPU kernels, thread counts and Pythons: what a user's laptop, Community Cloud or another
# CI may run. Each configuration runs `pytest -m "not slow and not browser"` and prints its time; the script fails if
# any configuration fails. Usage: scripts/test_matrix.sh [NAME ...] (default: all; names below).
#   avx2     torch, MKL and oneDNN limited to AVX2 (an AVX-512 machine computing as an AVX2-only one; alone, skipped
#            on an AVX2-only CPU, whose native run is the same configuration)
#   plain    torch's plain C++ kernels (ATEN_CPU_CAPABILITY=default)
#   1thread  one torch/OpenMP/MKL thread, one process;  2threads  two threads, one process
#   py3.12 py3.13  the suite in a venv of that Python (.venv-py3.12, .venv-py3.13), made here on first use from
#            pyenv's or the PATH's python3.12 / python3.13 with uv. No CPU build of torch for those Pythons is
#            reachable from here (PyPI's Linux wheels are CUDA builds), so they get PyPI's torch of the same version:
#            uv downloads it and its CUDA libraries in parallel, once for both venvs (about 2 minutes; pip took 12
#            per venv).
#   library  only the library's tests (tests/core, stats, analyses, search, results, present, cli, views): what a
#            kernel, thread count or Python can change is the library's arithmetic; the pages compare their numbers
#            with the library's in the same process
# Every configuration but 1thread and 2threads runs in two xdist workers of one thread each (the conftest sets it).
# NAME+NAME runs one configuration that is both (py3.12+plain: Python 3.12 on the plain kernels).
# scripts/test_matrix.sh --prepare py3.12 py3.13 only makes those venvs (.ci/run does it while the full suite runs).
set -euo pipefail
cd "$(dirname "$0")/.."
prepare=0
if [ "${1:-}" = "--prepare" ]; then prepare=1; shift; fi
[ $prepare = 1 ] || bash scripts/setup_env.sh requirements-dev.txt >/dev/null
quick=(-q -m "not slow and not browser" -p no:cacheprovider)
workers=(-n 2)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(avx2 plain 1thread 2threads py3.12 py3.13)

WARM_IMPORTS="import torch, transformers, scipy, sklearn, pandas, plotly, streamlit, attnlib.cli.entry, app_pages"  # what every leg imports

python_for() {  # a python executable of version $1, or nothing
  for candidate in "$HOME/.pyenv/versions/$1"*/bin/python"$1" "$(command -v "python$1" || true)"; do
    [ -x "$candidate" ] && { echo "$candidate"; return; }
  done
}

requirements_from_pypi() {  # requirements-dev.txt and requirements.txt into folder $1, torch as PyPI has it
  local folder=$1 torch
  torch=$(sed -n 's/^torch==\([0-9.]*\).*/\1/p' requirements.txt | head -1)
  grep -v -E '^(--find-links|--extra-index-url|torch==)' requirements.txt > "$folder/requirements.txt"
  echo "torch==$torch" >> "$folder/requirements.txt"
  cp requirements-dev.txt "$folder/requirements-dev.txt"  # its `-r requirements.txt` is read beside it
}

venv_for() {  # .venv-pyX.Y with the project's requirements, made once (a stamp records the requirements' hash)
  local version=$1 venv=".venv-py$1" python stamp hash uv=.venv/bin/uv
  hash=$(cat requirements-dev.txt requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
  stamp="$venv/.installed"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$hash" ]; then
    python=$(python_for "$version" || true)
    [ -n "$python" ] || { echo "no python$version found" >&2; return 1; }
    [ -x "$uv" ] || bash scripts/setup_env.sh requirements-dev.txt >&2
    echo "Making $venv with $("$python" --version)" >&2
    rm -rf "$venv"
    "$uv" venv -q --seed --python "$python" "$venv" >&2  # --seed: pip too (tests run it)
    requirements_from_pypi "$venv"
    "$uv" pip install -q --python "$venv/bin/python" -r "$venv/requirements-dev.txt" >&2
    "$uv" pip install -q --python "$venv/bin/python" --no-deps -e . >&2
    # bytecode of what the tests import, written by importing it (uv's --compile-bytecode compiles every module of
    # every package: 90 s of CPU per venv against 10 s); the legs write the rest as they import it
    PYTHONDONTWRITEBYTECODE='' "$venv/bin/python" -c "$WARM_IMPORTS" >&2
    echo "$hash" > "$stamp"
  fi
  echo "$venv/bin/python"
}

if [ $prepare = 1 ]; then
  for name in "${names[@]}"; do venv_for "${name#py}" >/dev/null; done  # names are py3.X here
  exit 0
fi

failed=()
for name in "${names[@]}"; do
  python=.venv/bin/python
  env_vars=()
  paths=()
  parallel=("${workers[@]}")
  skip=""
  IFS=+ read -r -a parts <<< "$name"
  for part in "${parts[@]}"; do
    case "$part" in
      avx2)
        if [ "$(.venv/bin/python -c 'import torch; print(torch.backends.cpu.get_cpu_capability())')" = AVX2 ] &&
          [ "$name" = avx2 ]; then
          skip="this CPU's own kernels are AVX2 (nothing wider for torch, MKL or oneDNN): the native run is this configuration"
        fi
        env_vars+=(ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2) ;;
      plain) env_vars+=(ATEN_CPU_CAPABILITY=default) ;;
      1thread) env_vars+=(OMP_NUM_THREADS=1 MKL_NUM_THREADS=1) parallel=() ;;
      2threads) env_vars+=(OMP_NUM_THREADS=2 MKL_NUM_THREADS=2) parallel=() ;;
      py3.*) python=$(venv_for "${part#py}") env_vars+=(PYTHONDONTWRITEBYTECODE=) ;;
      library) paths=(tests/core tests/stats tests/analyses tests/search tests/results tests/present tests/cli tests/views) ;;
      *) echo "unknown configuration: $part" >&2; exit 2 ;;
    esac
  done
  if [ -n "$skip" ]; then
    echo "== $name: skipped, $skip"
    continue
  fi
  start=$(date +%s)
  echo "== $name: $("$python" --version) ${env_vars[*]:-}"
  if env "${env_vars[@]}" "$python" -c "import torch; print('torch', torch.__version__, torch.backends.cpu.get_cpu_capability(), torch.get_num_threads(), 'threads')" &&
    env "${env_vars[@]}" "$python" -m pytest "${quick[@]}" "${parallel[@]}" "${paths[@]}"; then
    echo "== $name passed in $(($(date +%s) - start)) s"
  else
    echo "== $name FAILED after $(($(date +%s) - start)) s"
    failed+=("$name")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}"
  exit 1
fi
echo "every configuration passed: ${names[*]}"
