"""A keyed state as a Spark DataFrame, read by one Spark task per key-group range;
its export to files (`lockgate state export`); a savepoint bootstrapped from a
DataFrame."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lockgate.state import open_snapshot
from lockgate.state.spark import bootstrap, export, read_state
from lockgate.state.writer import KeyContext, SavepointWriter
from lockgate.testing import run_job
from pyspark.sql.types import LongType, StringType, StructField, StructType

from tests.state import jobs
from tests.state.test_read import stopped, write_savepoint
from tests.state.test_write import KEY, KEYS, NUMBERS, TOTAL, as_savepoint, assert_sums_continue
from tests.testing import jobs as testing_jobs


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


def test_export_writes_parquet_and_json_lines(spark: Any, tmp_path: Path) -> None:
    """What `lockgate state export` runs once it has started Spark."""
    savepoint, read = stopped("rocksdb", parallelism=2)
    saved = open_snapshot(write_savepoint(savepoint, tmp_path / "savepoint"), unsigned=True)
    counts = saved.state("kinds", "count")
    expected = {(str(k), n) for k, n in jobs.expected_rows(read)["count"]}
    export(spark, counts, "jsonl", f"file://{tmp_path}/jsonl", schema="key string, value long")
    lines = [
        json.loads(line)
        for part in (tmp_path / "jsonl").glob("part-*")
        for line in part.read_text().splitlines()
    ]
    assert {(r["key"], r["value"]) for r in lines} == expected
    export(
        spark, counts, "parquet", f"file://{tmp_path}/parquet", schema="key string, value long", partitions=3
    )
    back = spark.read.parquet(f"file://{tmp_path}/parquet").collect()
    assert {(r.key, r.value) for r in back} == expected


def test_a_savepoint_bootstrapped_from_a_dataframe_restores_a_job_that_continues_exactly(
    spark: Any, tmp_path: Path
) -> None:
    table = spark.createDataFrame(
        [(key, 1000 * key + part) for key in range(KEYS) for part in range(3)], ["key", "amount"]
    )

    def set_total(key: Any, records: list[dict[str, Any]], ctx: KeyContext) -> None:
        ctx.state(TOTAL).update(sum(r["amount"] for r in records))

    writer = SavepointWriter.new(max_parallelism=128, job_id="running-sum")
    bootstrap(writer, "sum", table, "key", set_total, parallelism=2).write(f"file://{tmp_path}/boot", KEY)

    saved = open_snapshot(f"file://{tmp_path}/boot", KEY)
    assert [s.key_groups for s in saved.operator("sum").subtasks] == [range(64), range(64, 128)]
    start = {key: sum(1000 * key + part for part in range(3)) for key in range(KEYS)}
    resumed = run_job(
        testing_jobs.running_sum,
        parallelism=3,
        sources={"numbers": NUMBERS},
        restore=as_savepoint(tmp_path / "boot"),
    )
    assert_sums_continue(resumed.outputs["out"], NUMBERS, start)
