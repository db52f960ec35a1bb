"""The keyed running sum from Kafka to Kafka, exactly once:

    lockgate run examples.kafka_sums:build --arg bootstrap=HOST:PORT \\
        --arg input=TOPIC --arg output=TOPIC [--arg stop_at=latest --bounded] \\
        [--arg partitioning=subtask]

Input records are JSON `{"key": ..., "n": ...}`; the output topic gets
`{"key", "n", "sum"}` keyed by the key, each record once for a `read_committed`
consumer, through kills, restarts and rescales (docs/operations.md, "Kafka").
Both topics must exist. `--arg stop_at=latest --bounded` reads what the input
holds when the job starts and ends. The output is partitioned by key, or with
`--arg partitioning=subtask` each sink subtask writes its own partition (the
tests do, on tansu: docs/operations.md, "What it was tested on")."""

from __future__ import annotations

from lockgate.runtime import KafkaSink, KafkaSource, StreamEnvironment

from examples.sums import RunningSum


def build(env: StreamEnvironment) -> None:
    servers = env.args["bootstrap"]
    source = KafkaSource(
        bootstrap_servers=servers,
        topics=[env.args["input"]],
        group_id=env.args.get("group", "kafka-sums"),
        starting_offsets="earliest",
        stop_at=env.args.get("stop_at"),
    )
    sink = KafkaSink(
        bootstrap_servers=servers,
        topic=env.args["output"],
        key=lambda r: str(r["key"]),
        partitioning=env.args.get("partitioning", "key"),
    )
    (
        env.source(source, name="numbers")
        .key_by(lambda record: record["key"])
        .process(RunningSum(), name="sum")
        .sink(sink, name="sums")
    )
