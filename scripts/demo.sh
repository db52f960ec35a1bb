#!/usr/bin/env bash
# Installs what is missing, then runs the main demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/python examples/state_demo.py
