#!/usr/bin/env bash
# The quick test tier across CPU kernels, thread counts and Pythons: what a user's laptop, Community Cloud or another
# CI may run. Each configuration runs `pytest -m "not slow and not browser"` and prints its time; the script fails if
# any configuration fails. Usage: scripts/test_matrix.sh [NAME ...] (default: all; names below).
#   avx2     torch, MKL and oneDNN limited to AVX2 (an AVX-512 machine computing as an AVX2-only one; skipped on an
#            AVX2-only CPU, whose native run is the same configuration)
#   plain    torch's plain C++ kernels (ATEN_CPU_CAPABILITY=default)
#   1thread  one torch/OpenMP/MKL thread;  2threads  two
#   py3.12 py3.13  the suite in a venv of that Python (.venv-py3.12, .venv-py3.13), made here on first use from
#            pyenv's or the PATH's python3.12 / python3.13. torch 2.13.0 for those Pythons comes from PyPI as its
#            CUDA build (the CPU wheel on disk is for 3.11): about 6 GB and 12-13 minutes of downloads per venv.
# scripts/test_matrix.sh --prepare py3.12 py3.13 only makes those venvs (.ci/run does it while the full suite runs).
set -euo pipefail
cd "$(dirname "$0")/.."
prepare=0
if [ "${1:-}" = "--prepare" ]; then prepare=1; shift; fi
[ $prepare = 1 ] || bash scripts/setup_env.sh requirements-dev.txt >/dev/null
quick=(-q -m "not slow and not browser" -p no:cacheprovider)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(avx2 plain 1thread 2threads py3.12 py3.13)

python_for() {  # a python executable of version $1, or nothing
  for candidate in "$HOME/.pyenv/versions/$1"*/bin/python"$1" "$(command -v "python$1" || true)"; do
    [ -x "$candidate" ] && { echo "$candidate"; return; }
  done
}

venv_for() {  # .venv-pyX.Y with the project's requirements, made once (a stamp records the requirements' hash)
  local version=$1 venv=".venv-py$1" python stamp hash
  hash=$(cat requirements-dev.txt requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
  stamp="$venv/.installed"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$hash" ]; then
    python=$(python_for "$version" || true)
    [ -n "$python" ] || { echo "no python$version found" >&2; return 1; }
    echo "Making $venv with $("$python" --version) (first run: several minutes)" >&2
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip >&2
    "$venv/bin/python" -m pip install -q -r requirements-dev.txt >&2
    "$venv/bin/python" -m pip install -q --no-deps -e . >&2
    echo "$hash" > "$stamp"
  fi
  echo "$venv/bin/python"
}

if [ $prepare = 1 ]; then
  for name in "${names[@]}"; do venv_for "${name#py}" >/dev/null; done
  exit 0
fi

failed=()
for name in "${names[@]}"; do
  python=.venv/bin/python
  env_vars=()
  case "$name" in
    avx2)
      if [ "$("$python" -c 'import torch; print(torch.backends.cpu.get_cpu_capability())')" = AVX2 ]; then
        echo "== avx2: skipped, this CPU's own kernels are AVX2 (nothing wider for torch, MKL or oneDNN): the native run is this configuration"
        continue
      fi
      env_vars=(ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2) ;;
    plain) env_vars=(ATEN_CPU_CAPABILITY=default) ;;
    1thread) env_vars=(OMP_NUM_THREADS=1 MKL_NUM_THREADS=1) ;;
    2threads) env_vars=(OMP_NUM_THREADS=2 MKL_NUM_THREADS=2) ;;
    py3.*) python=$(venv_for "${name#py}") ;;
    *) echo "unknown configuration: $name" >&2; exit 2 ;;
  esac
  start=$(date +%s)
  echo "== $name: $("$python" --version) ${env_vars[*]:-}"
  if env "${env_vars[@]}" "$python" -c "import torch; print('torch', torch.__version__, torch.backends.cpu.get_cpu_capability(), torch.get_num_threads(), 'threads')" &&
    env "${env_vars[@]}" "$python" -m pytest "${quick[@]}"; then
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
