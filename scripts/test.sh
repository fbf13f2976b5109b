#!/usr/bin/env bash
# One command to run every test, browser tests included: sets up .venv and Debian's Chromium, then pytest.
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
exec .venv/bin/python -m pytest "$@"
