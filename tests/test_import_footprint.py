"""What a command loads before it does anything: the import-linter contracts
(pyproject.toml) hold for the code as written; these tests hold them for the
modules Python actually loads, which package `__init__`s can widen. Every
`lockgate run` pays for what it loads before its first record (start-up is
measured in docs/benchmarks.md), and the operator's image need not carry what
it never runs."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import lockgate.runtime

RUNTIME_INIT = Path(lockgate.runtime.__file__).resolve()


def _loaded_after(statements: str) -> set[str]:
    """The modules a fresh interpreter holds after running `statements`."""
    probe = f"{statements}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def _under(loaded: set[str], *packages: str) -> list[str]:
    return sorted(m for m in loaded if any(m == p or m.startswith(f"{p}.") for p in packages))


def test_the_command_line_lists_the_operator_without_importing_kopf_or_kubernetes() -> None:
    """Failed before: building the parser loaded the operator command's module,
    and with it kopf and the Kubernetes client (0.3 s of every `lockgate run`)."""
    loaded = _loaded_after("from lockgate.runtime.cli import parser; parser()")
    assert "lockgate.operator.command" in loaded, "the parser lists `lockgate operator`"
    assert _under(loaded, "kopf", "kubernetes") == []


def test_lockgate_run_loads_neither_spark_nor_kafka_before_it_knows_it_needs_them() -> None:
    """Failed before: the command line's `__init__` imported the Spark adapter for
    two exception classes, so even `lockgate run --local` loaded pyspark; the
    runtime's `__init__` imported every connector, Kafka's included."""
    loaded = _loaded_after(
        "import lockgate.runtime.cli.run\nfrom lockgate.runtime.cli import parser; parser()"
    )
    assert _under(loaded, "pyspark", "lockgate.runtime.spark", "confluent_kafka") == []
    assert _under(loaded, "lockgate.runtime.connectors") == []


def test_a_local_run_from_flags_loads_no_yaml_reader_spark_or_kafka(tmp_path: Path) -> None:
    """A whole `lockgate run --local` (not only its imports: what it loads while it
    runs as well). Failed before: reading a manifest's YAML was imported with the
    manifest model, so every run loaded PyYAML (20-30 ms of its start-up)."""
    repository = Path(__file__).resolve().parents[1]
    run = (
        f"import os, sys; sys.path.insert(0, {str(repository)!r}); os.chdir({str(tmp_path)!r})\n"
        "from lockgate.runtime.cli import main\n"
        "assert main(['run', 'tests.jobs.configurable:running_sum', '--local', '--bounded', '-p', '2', "
        f"'--arg', 'count=100', '--arg', 'output=file://{tmp_path}/out']) == 0"
    )
    loaded = _loaded_after(run)
    assert "lockgate.runtime.engine.task" in loaded, "the job ran"
    assert _under(loaded, "yaml", "pyspark", "lockgate.runtime.spark", "confluent_kafka") == []


def test_the_operator_loads_no_engine_driver_spark_or_connector() -> None:
    """Failed before: `lockgate.runtime`'s `__init__` loaded the job API and every
    connector for any runtime module the operator imports, and
    `lockgate.runtime.driver`'s loaded the job master for the option types."""
    loaded = _loaded_after("import lockgate.operator.service, lockgate.operator.command")
    assert _under(loaded, "pyspark", "confluent_kafka", "rocksdict") == []
    assert (
        _under(
            loaded,
            "lockgate.runtime.api",
            "lockgate.runtime.backends",
            "lockgate.runtime.cli",
            "lockgate.runtime.connectors",
            "lockgate.runtime.spark",
            "lockgate.runtime.driver.drive",
            "lockgate.runtime.driver.options",
        )
        == []
    )
    # The lost driver's backoff is the runtime's one restart strategy; nothing else of the engine.
    assert _under(loaded, "lockgate.runtime.engine") == [
        "lockgate.runtime.engine",
        "lockgate.runtime.engine.restart",
    ]


def test_a_runtime_module_loads_none_of_the_public_api_on_its_way() -> None:
    loaded = _loaded_after("import lockgate.runtime.spec.model")
    assert (
        _under(loaded, "lockgate.runtime.api", "lockgate.runtime.connectors", "lockgate.runtime.state") == []
    )


def test_every_public_name_of_lockgate_runtime_is_the_one_its_type_checked_import_names() -> None:
    """The names are imported when first read: the map that finds them at run time
    and the imports type checkers read must say the same."""
    tree = ast.parse(RUNTIME_INIT.read_text())
    typed = {
        alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lockgate.")
        for alias in node.names
    }
    assert sorted(typed) == sorted(lockgate.runtime.__all__)
    for name, module in typed.items():
        assert getattr(__import__(module, fromlist=[name]), name) is getattr(lockgate.runtime, name), name
