#!/usr/bin/env bash
# Installs what is missing, then runs the main demo: a word count on Spark,
# exactly once, and keyed state restored at another parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/python examples/wordcount_demo.py
.venv/bin/python examples/state_demo.py
