#!/usr/bin/env bash
# One command to run the app: sets up .venv on first use, then `streamlit run app.py`. Extra arguments go to streamlit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh requirements.txt
exec .venv/bin/python -m streamlit run app.py "$@"
