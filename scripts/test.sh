#!/usr/bin/env bash
# Installs everything, then runs the whole check: lint, types, layering, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh

sources=(runtime operator testing console state tests e2e bench examples)
echo "== ruff"
.venv/bin/ruff check "${sources[@]}"
.venv/bin/ruff format --check "${sources[@]}"
echo "== mypy --strict"
.venv/bin/mypy -p lockgate.runtime -p lockgate.operator -p lockgate.testing -p lockgate.console -p lockgate.state
echo "== import layers"
.venv/bin/lint-imports
echo "== pytest"
status=0
.venv/bin/pytest "$@" || status=$?
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure, not a pass" >&2
fi
exit "$status"
