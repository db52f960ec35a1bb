"""The keyed running count in Spark Structured Streaming, run by
bench/peers/keyed_count.py in its own virtualenv (pyspark with pandas and
pyarrow; never a Lockgate dependency). Reads the shared CSV partitions (n, k, v)
as a file stream, one file per micro-batch (each micro-batch is a checkpoint;
the partitions are sized so that is about every 5 s), per key a (count, sum) in
the RocksDB state store through `transformWithState` (the row API), one output
row per input row, into CSV files, `availableNow` so it ends at the input's
end. `local[P]`.

Prints one JSON line: the query's runtime (from its start to its end, without
the Spark session's start) and the wall time of the script.

    python spark_keyed_count.py INPUT_DIR PARALLELISM OUTPUT_DIR CHECKPOINT_DIR
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle


class CountAndSum(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count_sum = handle.getValueState("count_sum", "count long, total long")

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:  # noqa: N802, N803 (Spark's names)
        count, total = self.count_sum.get() if self.count_sum.exists() else (0, 0)
        for row in rows:
            count, total = count + 1, total + row.v
            yield Row(k=key[0], n=row.n, cnt=count, total=total)
        self.count_sum.update((count, total))

    def close(self) -> None:
        pass


def main() -> None:
    input_dir, parallelism, output, checkpoints = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    started = time.monotonic()
    # The Python workers must be this virtualenv's, which has pyarrow and protobuf.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master(f"local[{parallelism}]")
        .config("spark.sql.shuffle.partitions", str(parallelism))
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    records = spark.readStream.schema("n long, k long, v long").option("maxFilesPerTrigger", 1).csv(input_dir)
    counted = records.groupBy("k").transformWithState(
        statefulProcessor=CountAndSum(),
        outputStructType="k long, n long, cnt long, total long",
        outputMode="Append",
        timeMode="None",
    )
    query_started = time.monotonic()
    query = (
        counted.writeStream.format("csv")
        .option("checkpointLocation", checkpoints)
        .trigger(availableNow=True)
        .start(output)
    )
    query.awaitTermination()
    runtime = time.monotonic() - query_started
    spark.stop()
    print(json.dumps({"runtime_s": runtime, "script_wall_s": time.monotonic() - started}))


if __name__ == "__main__":
    main()
