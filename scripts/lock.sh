#!/usr/bin/env bash
# Regenerates requirements.lock: every package the image installs (Lockgate's
# dependencies and its operator, s3, gcs and kafka extras, with what they need in turn), pinned
# with the SHA-256 of each file PyPI serves. The image installs from it with
# --require-hashes; scripts/install.sh holds the development environment to the
# same versions. Run it after changing the dependencies in pyproject.toml, and
# commit the result. Needs PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .cache/pip-tools/bin/pip-compile ] || {
    python3 -m venv .cache/pip-tools
    .cache/pip-tools/bin/python -m pip install -q --disable-pip-version-check 'pip-tools>=7.4'
}
# This machine's own pip settings (local indexes, caps) must not shape the lock.
PIP_CONFIG_FILE=/dev/null PIP_CONSTRAINT= PIP_FIND_LINKS= .cache/pip-tools/bin/pip-compile \
    --quiet --generate-hashes --allow-unsafe --strip-extras --extra operator --extra s3 --extra gcs --extra kafka \
    --index-url https://pypi.org/simple --no-emit-index-url \
    --output-file requirements.lock pyproject.toml
