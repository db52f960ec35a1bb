"""The keyed running count in Flink SQL, run by bench/peers/keyed_count.py in
Flink's own virtualenv (never a Lockgate dependency). Reads the shared CSV
partitions (n, k, v) with the filesystem connector, RocksDB state, a checkpoint
every 5 s into files, exactly-once, P as given, and either

- `over`: an OVER aggregation — per key, COUNT(*) and SUM(v) over all rows so
  far in processing-time order, one output row per input row — into CSV files
  (the same job as Lockgate's), or
- `groupby`: a GROUP BY k aggregation into the blackhole connector (Flink's best
  case: updates are dropped, nothing is written or verified).

Prints one JSON line: the job's net runtime (Flink's own measure, from the job's
start to its end, without the mini-cluster's start), and the wall time of the
INSERT statement.

    python flink_keyed_count.py over|groupby INPUT_DIR PARALLELISM OUTPUT_DIR
"""

from __future__ import annotations

import json
import sys
import time

from flink_environment import streaming_environment


def main() -> None:
    mode, input_dir, parallelism, output = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    started = time.monotonic()
    env = streaming_environment(parallelism, f"file://{output}-checkpoints")
    env.execute_sql(
        f"""
        CREATE TABLE records (n BIGINT, k BIGINT, v BIGINT, pt AS PROCTIME()) WITH (
            'connector' = 'filesystem', 'path' = 'file://{input_dir}', 'format' = 'csv'
        )"""
    )
    if mode == "over":
        env.execute_sql(
            f"""
            CREATE TABLE out_counts (k BIGINT, n BIGINT, cnt BIGINT, total BIGINT) WITH (
                'connector' = 'filesystem', 'path' = 'file://{output}', 'format' = 'csv'
            )"""
        )
        statement = """
            INSERT INTO out_counts
            SELECT k, n, COUNT(*) OVER w, SUM(v) OVER w FROM records
            WINDOW w AS (PARTITION BY k ORDER BY pt ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"""
    else:
        env.execute_sql(
            "CREATE TABLE out_counts (k BIGINT, cnt BIGINT, total BIGINT) WITH ('connector' = 'blackhole')"
        )
        statement = "INSERT INTO out_counts SELECT k, COUNT(*), SUM(v) FROM records GROUP BY k"
    submitted = time.monotonic()
    result = env.execute_sql(statement)
    client = result.get_job_client()
    assert client is not None
    execution = client.get_job_execution_result().result()
    print(
        json.dumps(
            {
                "runtime_s": execution.get_net_runtime() / 1000,
                "insert_wall_s": time.monotonic() - submitted,
                "script_wall_s": time.monotonic() - started,
            }
        )
    )


if __name__ == "__main__":
    main()
