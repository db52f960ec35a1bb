"""Spark's own `statestore` data source reading a transformWithState job's state,
run by bench/state_dataframe.py in the peer's virtualenv (pyspark with pandas,
pyarrow and protobuf; never a Lockgate dependency).

First a streaming query keeps per key a ValueState `payload` (the row API of
`transformWithState`, the RocksDB state store, 2 shuffle partitions) from KEYS
records `(key, payload)` (payload: `VALUE_BYTES` bytes of SHA-512 of the key, as
bench/state_dataframe.py computes them), one micro-batch, `availableNow`. Then,
for each line P read from standard input (bench/state_dataframe.py sends them
in turn with its own reads), `local[P]` reads that state with
`spark.read.format("statestore").option("stateVarName", "payload")`: an
aggregate of the row count, the sum of the keys and the sum of the payloads'
CRC-32s (the same checksum the Lockgate side computes).

Prints one JSON line for the state written, then one per read.

    python spark_state_reader.py WORK_DIR KEYS VALUE_BYTES
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import Column, Row, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


class KeepPayload(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.payload = handle.getValueState("payload", "payload binary")

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:  # noqa: N802, N803 (Spark's names)
        for row in rows:
            self.payload.update((row.payload,))
        yield Row(key=key[0])

    def close(self) -> None:
        pass


def session(parallelism: int) -> SparkSession:
    spark = (
        SparkSession.builder.master(f"local[{parallelism}]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def payload_of(key: Column, value_bytes: int) -> Column:
    """`value_bytes` bytes: SHA-512 of "key:0", "key:1", … concatenated."""
    blocks = [
        F.unhex(F.sha2(F.concat(key.cast("string"), F.lit(f":{i}")), 512))
        for i in range(-(-value_bytes // 64))
    ]
    return F.substring(F.concat(*blocks), 1, value_bytes)


def keep_state(spark: SparkSession, work: Path, keys: int, value_bytes: int) -> dict[str, Any]:
    records = spark.range(0, keys, numPartitions=8).select(
        F.col("id").alias("key"), payload_of(F.col("id"), value_bytes).alias("payload")
    )
    records.write.parquet(str(work / "input"))
    started = time.monotonic()
    stream = spark.readStream.schema("key long, payload binary").parquet(str(work / "input"))
    query = (
        stream.groupBy("key")
        .transformWithState(KeepPayload(), "key long", "Append", "None")
        .writeStream.format("noop")
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    state = work / "checkpoint" / "state"
    size = sum(p.stat().st_size for p in state.rglob("*") if p.is_file())
    return {"what": "state", "seconds": time.monotonic() - started, "state_bytes": size}


def read_once(spark: SparkSession, work: Path) -> dict[str, Any]:
    started = time.monotonic()
    state = spark.read.format("statestore").option("stateVarName", "payload").load(str(work / "checkpoint"))
    (row,) = state.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum("key.key").alias("key_sum"),
        F.sum(F.crc32("value.payload")).alias("crc_sum"),
    ).collect()
    seconds = time.monotonic() - started
    return {
        "what": "read",
        "seconds": seconds,
        "rows": row.rows,
        "key_sum": row.key_sum,
        "crc_sum": row.crc_sum,
    }


def main() -> None:
    work, keys, value_bytes = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    # The Python workers must be this virtualenv's, which has pyarrow and protobuf.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = session(2)
    print(json.dumps(keep_state(spark, work, keys, value_bytes)), flush=True)
    running = 2
    for line in sys.stdin:  # one read per line, at the P it gives, in turn with Lockgate's
        parallelism = int(line)
        if parallelism != running:
            spark.stop()
            spark, running = session(parallelism), parallelism
        print(json.dumps({"parallelism": parallelism, **read_once(spark, work)}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
