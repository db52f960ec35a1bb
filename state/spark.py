"""A keyed state as a Spark DataFrame, read in parallel by key-group range: one
Spark task per range, each opening the snapshot's files for its key groups itself
(the driver reads only `_metadata`, which it verified); and a keyed operator's
state bootstrapped from a DataFrame, each Spark task writing one subtask's file.
The one module of `lockgate.state` that imports pyspark."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from lockgate.runtime.key_serializer import serialize_key
from lockgate.runtime.keygroups import key_group_of_bytes
from lockgate.runtime.snapshot.metadata import SubtaskState, VertexState
from lockgate.state.errors import StateAccessError
from lockgate.state.rows import Row
from lockgate.state.saved import StateRef
from lockgate.state.writer import (
    BootstrapFunction,
    SavepointWriter,
    SubtaskPlan,
    bootstrap_records,
    write_keyed_subtask,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType


def read_state(
    spark: SparkSession,
    state: StateRef,
    *,
    schema: StructType | str | None = None,
    partitions: int | None = None,
) -> DataFrame:
    """`state`'s rows (`SavedState.state(operator, name)`) as a DataFrame under its
        columns (`lockgate.state.rows`). `schema`: a StructType or DDL ('key string, value
    long'); without one, Spark infers the column types
        from the first rows; values Spark has no type for (a class of the job's) need a
        `schema` and a state serializer that gives Spark-friendly values, or
        `SavedState.rows`. `partitions`: how many even key-group ranges to read (default:
        one per subtask of the snapshot)."""
    if state.options.now_ms is None:  # one "now" for every task's TTL expiry
        state = dataclasses.replace(
            state, options=dataclasses.replace(state.options, now_ms=state.options.expired_by())
        )
    ranges = [(r.start, r.stop) for r in state.ranges(partitions)]
    rows = spark.sparkContext.parallelize(ranges, len(ranges)).flatMap(functools.partial(_read_range, state))
    return spark.createDataFrame(rows, schema=schema if schema is not None else list(state.columns))


def export(
    spark: SparkSession,
    state: StateRef,
    file_format: Literal["parquet", "jsonl"],
    output: str,
    *,
    schema: StructType | str | None = None,
    partitions: int | None = None,
) -> None:
    """Write `state`'s rows (`read_state`) as parquet or JSON lines files into the
    directory `output` (which must not exist), one Spark task per key-group range."""
    writer = read_state(spark, state, schema=schema, partitions=partitions).write.mode("errorifexists")
    if file_format == "parquet":
        writer.parquet(output)
    else:
        writer.json(output)


def _read_range(state: StateRef, bounds: tuple[int, int]) -> Iterator[Row]:
    """In a Spark task: the rows of one key-group range."""
    for row in state.rows(range(*bounds)):
        yield tuple(_spark_value(value) for value in row)


def _spark_value(value: Any) -> Any:
    """A dataclass as the dict of its fields (a struct, or a map); anything else as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def bootstrap(
    writer: SavepointWriter,
    operator: str,
    frame: DataFrame,
    key_column: str,
    fn: BootstrapFunction,
    *,
    parallelism: int = 1,
) -> SavepointWriter:
    """Add keyed operator `operator` to `writer`'s savepoint, its state set by
    `fn(key, rows_of_key, ctx)` (each row a dict) from `frame`'s rows keyed by
    `key_column`. When the savepoint is written, Spark partitions the rows by the
    subtask owning their key and sorts them by key; each task writes its subtask's
    file and hands back only its handle."""
    if key_column not in frame.columns:
        raise StateAccessError(
            f"bootstrap of {operator!r}: the DataFrame has no column {key_column!r} (it has: "
            f"{', '.join(frame.columns)})"
        )
    if parallelism < 1:
        raise StateAccessError(f"bootstrap of {operator!r}: parallelism must be positive, got {parallelism}")

    def writes(url: str, name: str, max_parallelism: int) -> VertexState:
        m, p = max_parallelism, parallelism
        if p > m:
            raise StateAccessError(f"bootstrap of {name!r}: parallelism {p} exceeds max parallelism {m}")

        def keyed(row: Any) -> tuple[tuple[int, bytes], dict[str, Any]]:
            key_bytes = serialize_key(row[key_column])
            return (key_group_of_bytes(key_bytes, m) * p // m, key_bytes), row.asDict(recursive=True)

        def write(index: int, items: Iterable[tuple[tuple[int, bytes], dict[str, Any]]]) -> Iterable[str]:
            records = ((key[1], record) for key, record in items)
            plan = SubtaskPlan(name, index, p, m, url)
            yield json.dumps(write_keyed_subtask(plan, bootstrap_records(records, fn, name), None).to_json())

        partitioned = frame.rdd.map(keyed).repartitionAndSortWithinPartitions(p, lambda key: key[0])
        written = partitioned.mapPartitionsWithIndex(write).collect()
        subtasks = sorted((SubtaskState.from_json(json.loads(s)) for s in written), key=lambda s: s.subtask)
        return VertexState(p, m, tuple(subtasks))

    return writer.add_written(operator, writes)
