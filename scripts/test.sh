#!/usr/bin/env bash
# One command to check everything: sets up .venv (attnlib installed editable) and Debian's Chromium, runs ruff
# (lint and format check) and mypy, then pytest. Extra arguments go to pytest, e.g. the quick tier:
#   bash scripts/test.sh -m "not slow and not browser"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh requirements-dev.txt
if [ ! -x /usr/bin/chromium ]; then
  echo "Installing Chromium from Debian (browser tests drive it with Playwright)"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q chromium
fi
echo "ruff check, ruff format --check, mypy"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
