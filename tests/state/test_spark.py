"""A keyed state as a Spark DataFrame, read by one Spark task per key-group range,
and `lockgate state export`, which writes one with Spark."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from lockgate.state import open_snapshot
from lockgate.state.spark import read_state
from pyspark.sql.types import LongType, StringType, StructField, StructType

from tests.state import jobs
from tests.state.test_command import LOCKGATE
from tests.state.test_read import stopped, write_savepoint


def test_a_state_reads_as_a_dataframe_one_task_per_key_group_range(spark: Any, tmp_path: Path) -> None:
    savepoint, read = stopped("heap", parallelism=2, records=jobs.records(60, int_keys=False))
    saved = open_snapshot(write_savepoint(savepoint, tmp_path), unsigned=True)
    expected = jobs.expected_rows(read)

    parities = read_state(spark, saved.state("kinds", "parities"))
    assert parities.columns == ["key", "user_key", "value"]
    assert parities.rdd.getNumPartitions() == 2, "one task per subtask's key groups"
    schema = StructType([StructField("key", StringType()), StructField("value", LongType())])
    totals = read_state(spark, saved.state("kinds", "total"), schema=schema, partitions=4)
    assert totals.rdd.getNumPartitions() == 4
    assert {(r.key, r.value) for r in totals.collect()} == expected["total"]
    counts = read_state(spark, saved.state("means", "_window.windows"), partitions=3).where("key = 'k1'")
    assert {(r.window_start, tuple(r.value)) for r in counts.collect()} == {
        (start, held) for key, start, _, held in expected["windows"] if key == "k1"
    }


def test_export_writes_jsonl_with_spark(tmp_path: Path) -> None:
    savepoint, read = stopped("rocksdb", parallelism=2)
    url = write_savepoint(savepoint, tmp_path / "savepoint")
    out = tmp_path / "totals"
    done = subprocess.run(
        [
            LOCKGATE,
            "state",
            "export",
            url,
            "kinds",
            "count",
            "--unsigned",
            "--format",
            "jsonl",
            "--output",
            f"file://{out}",
            "--schema",
            "key string, value long",
            "--master",
            "local[2]",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for part in sorted(out.glob("part-*")) for line in part.read_text().splitlines()]
    assert {(r["key"], r["value"]) for r in rows} == {
        (str(k), n) for k, n in jobs.expected_rows(read)["count"]
    }
