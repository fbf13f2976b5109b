#!/usr/bin/env bash
# Create .venv (once) and install a requirements file into it when that file changed. Usage: setup_env.sh FILE
# requirements.txt (the app: scripts/app.sh) goes in with pip, which reads the user's own pip configuration; the
# developers' files (requirements-dev.txt, requirements-scale.txt) with uv, about five times faster on a bare machine
# (CI), which passes pip's PIP_FIND_LINKS / PIP_INDEX_URL / PIP_EXTRA_INDEX_URL on to it.
set -euo pipefail
cd "$(dirname "$0")/.."
req="${1:-requirements.txt}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "Creating .venv with $($python --version)"
  "$python" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
stamp=".venv/.installed-$(basename "$req")"
hash=$(cat "$req" requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$hash" ]; then
  echo "Installing $req into .venv (first run takes a few minutes)"
  # requirements.txt's --find-links page of torch files: where its host does not resolve (an offline mirror) pip is
  # told to try each package once (a fresh install took 1202 s with retries, 86 s without) and uv is given the
  # requirements without that line (uv stops at a page it cannot read)
  offline=0
  getent hosts download.pytorch.org >/dev/null || offline=1
  if [ "$req" = requirements.txt ]; then
    retries=()
    [ $offline = 0 ] || retries=(--retries 0)
    .venv/bin/python -m pip install -q "${retries[@]}" -r "$req"
  else
    uv_version=$(sed -n 's/^uv==//p' requirements-dev.txt)
    .venv/bin/python -m pip install -q "uv==$uv_version"
    folder=$(mktemp -d)
    trap 'rm -rf "$folder"' EXIT
    for file in requirements.txt "$req"; do
      if [ $offline = 1 ]; then grep -v '^--find-links https://' "$file"; else cat "$file"; fi > "$folder/$(basename "$file")"
    done
    sources=()
    for link in ${PIP_FIND_LINKS:-}; do sources+=(--find-links "$link"); done
    [ -z "${PIP_INDEX_URL:-}" ] || sources+=(--index-url "$PIP_INDEX_URL")
    for index in ${PIP_EXTRA_INDEX_URL:-}; do sources+=(--extra-index-url "$index"); done
    .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "${sources[@]}" -r "$folder/$(basename "$req")"
  fi
  .venv/bin/python -m pip install -q --no-deps -e .  # attnlib importable from anywhere, and the `attnlib` command
  echo "$hash" > "$stamp"
fi
