#!/usr/bin/env bash
# Installs what is missing, then runs the main demo: a job on Spark survives a
# killed worker, is stopped with a savepoint and resumed at another parallelism,
# with exactly-once output; then a word count, and keyed state rescaled.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/python examples/recovery_demo.py
.venv/bin/python examples/wordcount_demo.py
.venv/bin/python examples/state_demo.py
