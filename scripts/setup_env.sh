#!/usr/bin/env bash
# Create .venv (once) and install a requirements file into it when that file changed. Usage: setup_env.sh FILE
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
  # pip reads requirements.txt's --find-links page once per package, retrying each failure: where the host does not
  # resolve (an offline mirror), one try each (a fresh install took 1202 s with retries, 86 s without)
  retries=()
  getent hosts download.pytorch.org >/dev/null || retries=(--retries 0)
  .venv/bin/python -m pip install -q "${retries[@]}" -r "$req"
  .venv/bin/python -m pip install -q --no-deps -e .  # attnlib importable from anywhere, and the `attnlib` command
  echo "$hash" > "$stamp"
fi
