"""What `lockgate` imports before it runs a command: every run pays for it
before its JVM starts (start-up is measured in docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys


def test_the_command_line_lists_the_operator_without_importing_kopf_or_kubernetes() -> None:
    """Failed before: building the parser loaded the operator command's module,
    and with it kopf and the Kubernetes client (0.3 s of every `lockgate run`)."""
    probe = (
        "import sys; from lockgate.runtime.cli import parser; "
        "commands = parser()._subparsers._group_actions[0].choices; "
        "print(sorted(commands)); "
        "print(sorted(m for m in ('kopf', 'kubernetes') if m in sys.modules))"
    )
    listed, imported = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert "operator" in listed
    assert imported == "[]"
