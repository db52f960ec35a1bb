"""The window benchmark's workload in Flink SQL, run by bench/window_throughput.py
in Flink's own virtualenv (never a Lockgate dependency): the same clicks (record
n: key = n * 2654435761 mod 2^32 mod keys, event time = EPOCH + n ms) from the
datagen sequence (unthrottled: datagen's default is 10,000 rows/s), a one-minute
TUMBLE count per key with a watermark at the event time, RocksDB state, a
checkpoint every 5 s into files, P = 2, written to CSV files.
Prints one JSON line: the job's net runtime (Flink's own measure, without the
mini-cluster's start), the wall time of the INSERT, and the windows and records
counted.

    python flink_window.py COUNT KEYS PARALLELISM OUTPUT_DIR
"""

from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path

from flink_environment import streaming_environment

EPOCH_MS = 1_700_000_000_000


def main() -> None:
    count, keys, parallelism, output = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    env = streaming_environment(parallelism, f"file://{output}-checkpoints")
    env.execute_sql(
        f"""
        CREATE TABLE clicks (
            n BIGINT,
            k AS MOD(MOD(n * 2654435761, 4294967296), {keys}),
            ts AS TO_TIMESTAMP_LTZ({EPOCH_MS} + n, 3),
            WATERMARK FOR ts AS ts
        ) WITH (
            'connector' = 'datagen',
            'fields.n.kind' = 'sequence', 'fields.n.start' = '0', 'fields.n.end' = '{count - 1}',
            'rows-per-second' = '1000000000'
        )"""
    )
    env.execute_sql(
        f"""
        CREATE TABLE out_counts (k BIGINT, window_start TIMESTAMP(3), n BIGINT) WITH (
            'connector' = 'filesystem', 'path' = 'file://{output}', 'format' = 'csv'
        )"""
    )
    started = time.monotonic()
    result = env.execute_sql(
        """
        INSERT INTO out_counts
        SELECT k, window_start, COUNT(*) FROM TABLE(
            TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
        GROUP BY k, window_start, window_end"""
    )
    client = result.get_job_client()
    assert client is not None
    execution = client.get_job_execution_result().result()
    wall = time.monotonic() - started
    runtime = execution.get_net_runtime() / 1000  # from the job's start to its end: no cluster start-up
    windows = counted = 0
    for path in output.rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            for row in csv.reader(path.open()):
                windows += 1
                counted += int(row[2])
    print(json.dumps({"runtime_s": runtime, "wall_s": wall, "windows": windows, "counted": counted}))


if __name__ == "__main__":
    main()
