"""The Spark session of `lockgate run` (spark/session.py): what Spark's scheduler
reports while the session stops is not shown, unless failures are asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

STOPPING_SESSION = """
import sys
from lockgate.runtime.spark.session import command_session

TID = 987654321
sessions = []


def report_a_late_kill():
    # What Spark's executor does when a task the stop killed reports after its task set ended.
    spark = sessions[0]
    jvm = spark.sparkContext._jvm
    spark.sparkContext._jsc.sc().taskScheduler().statusUpdate(
        TID, jvm.org.apache.spark.TaskState.KILLED(), jvm.java.nio.ByteBuffer.allocate(0)
    )


with command_session(
    "local[1]", "stopping", on_stop=report_a_late_kill, task_failures_logged=sys.argv[1] == "logged"
) as spark:
    sessions.append(spark)
print("stopped", flush=True)
"""


@pytest.mark.parametrize("failures", ["quiet", "logged"])
def test_the_schedulers_reports_while_the_session_stops_are_shown_only_when_asked(
    tmp_path: Path, failures: str
) -> None:
    script = tmp_path / "stopping.py"
    script.write_text(STOPPING_SESSION)
    result = subprocess.run(
        [sys.executable, str(script), failures], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "stopped" in result.stdout
    reported = "TID 987654321" in result.stderr
    assert reported == (failures == "logged"), result.stderr
