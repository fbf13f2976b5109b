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
  .venv/bin/python -m pip install -q -r "$req"
  .venv/bin/python -m pip install -q --no-deps -e .  # attnlib importable from anywhere, and the `attnlib` command
  echo "$hash" > "$stamp"
fi
