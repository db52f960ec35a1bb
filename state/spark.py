"""A keyed state as a Spark DataFrame, read in parallel by key-group range: one
Spark task per range, each opening the snapshot's files for its key groups itself
(the driver reads only `_metadata`, which it verified). The one module of
`lockgate.state` that imports pyspark."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

from lockgate.state.rows import Row
from lockgate.state.saved import StateRef
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType


def read_state(
    spark: SparkSession, state: StateRef, *, schema: StructType | None = None, partitions: int | None = None
) -> DataFrame:
    """`state`'s rows (`SavedState.state(operator, name)`) as a DataFrame under its
    columns (`lockgate.state.rows`). Without `schema`, Spark infers the column types
    from the first rows; values Spark has no type for (a class of the job's) need a
    `schema` and a state serializer that gives Spark-friendly values, or
    `SavedState.rows`. `partitions`: how many even key-group ranges to read (default:
    one per subtask of the snapshot)."""
    ranges = [(r.start, r.stop) for r in state.ranges(partitions)]
    rows = spark.sparkContext.parallelize(ranges, len(ranges)).flatMap(functools.partial(_read_range, state))
    return spark.createDataFrame(rows, schema=schema if schema is not None else list(state.columns))


def _read_range(state: StateRef, bounds: tuple[int, int]) -> Iterator[Row]:
    """In a Spark task: the rows of one key-group range."""
    for row in state.rows(range(*bounds)):
        yield tuple(_spark_value(value) for value in row)


def _spark_value(value: Any) -> Any:
    """A dataclass as the dict of its fields (a struct, or a map); anything else as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value
