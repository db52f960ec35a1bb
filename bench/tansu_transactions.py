"""How often concurrent Kafka transactions wedge a partition of the tests' broker.

tansu 0.6.0 holds a committed transaction until the transactions that wrote
to the same partitions meanwhile have ended. Under concurrent commits it can
end up holding a partition for good: from then on no transaction that writes
to that partition shows, whoever writes it (a new transactional id included),
while other topics go on. A job's `KafkaSink` then waits for its marker,
fails after `transaction.timeout.ms`, restarts and waits again.

Each trial starts a broker, and `--writers` transactional producers (threads)
commit `--rounds` transactions each, as the sink does: begin, 20 records,
the marker (an offset of a group named as the transactional id), commit, then
wait until the marker shows. A trial is wedged when a marker does not show
within 10 s; then a fresh producer writes one transaction to the same topic,
and one to a new topic, to tell a wedged partition from a stopped broker.
Two layouts, in the same run:

- `shared`: every writer writes both partitions of a 2-partition topic (a
  sink partitioned by key);
- `own`: writer i writes partition i only (`KafkaSink(partitioning="subtask")`,
  what the tests' Kafka jobs use).

    .venv/bin/python bench/tansu_transactions.py [--trials N] [--writers W] [--rounds R]
        [--abandon-every N] [--layouts shared own]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.kafka_broker import QUIET, KafkaBroker, kafka_broker  # noqa: E402

SHOWS_WITHIN_S = 10.0
RECORDS_PER_TRANSACTION = 20
LAYOUTS = ("shared", "own")


def commit_rounds(
    broker: KafkaBroker,
    topic: str,
    writer: str,
    partitions: list[int],
    rounds: int,
    abandon_every: int = 0,
    reopen_every: int = 0,
) -> str:
    """`rounds` transactions of transactional id `writer`; 'ok', or where a marker stuck.
    With `abandon_every` N, every Nth transaction is left open with its records
    sent, as by a writer killed mid-commit, and a new producer of the same id
    takes over (its `init_transactions` aborts the open one), as a restore does."""
    servers = broker.bootstrap_servers
    settings = {"bootstrap.servers": servers, "transactional.id": writer, **QUIET}
    producer = Producer(settings)
    abandoned = []  # kept, not closed: a killed writer does not abort
    group = Consumer({"bootstrap.servers": servers, "group.id": writer, "enable.auto.commit": False, **QUIET})
    marker_partition = TopicPartition(topic, 0)
    try:
        producer.init_transactions(30)
        for round_ in range(1, rounds + 1):
            producer.begin_transaction()
            for n in range(RECORDS_PER_TRANSACTION):
                producer.produce(topic, b"x", partition=partitions[n % len(partitions)])
            if reopen_every and round_ % reopen_every == 0:  # as a writer that closes and restarts
                producer.commit_transaction(30)
                producer.flush(30)
                group.close()
                del producer
                producer = Producer(settings)
                group = Consumer(
                    {"bootstrap.servers": servers, "group.id": writer, "enable.auto.commit": False, **QUIET}
                )
                producer.init_transactions(30)
                producer.begin_transaction()
                for n in range(RECORDS_PER_TRANSACTION):
                    producer.produce(topic, b"x", partition=partitions[n % len(partitions)])
            if abandon_every and round_ % abandon_every == 0:
                producer.flush(30)
                abandoned.append(producer)
                producer = Producer(settings)
                producer.init_transactions(30)
                producer.begin_transaction()
                for n in range(RECORDS_PER_TRANSACTION):
                    producer.produce(topic, b"x", partition=partitions[n % len(partitions)])
            marker = [TopicPartition(topic, 0, round_)]
            producer.send_offsets_to_transaction(marker, group.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            deadline = time.monotonic() + SHOWS_WITHIN_S
            while group.committed([marker_partition], timeout=10)[0].offset != round_:
                if time.monotonic() > deadline:
                    return f"round {round_}: committed, not shown within {SHOWS_WITHIN_S:g} s"
                time.sleep(0.005)  # polling the broker: it has no notification
        return "ok"
    finally:
        group.close()


def trial(layout: str, writers: int, rounds: int, abandon_every: int, reopen_every: int) -> str:
    with tempfile.TemporaryDirectory() as scratch, kafka_broker(Path(scratch) / "tansu.log") as broker:
        topic = broker.create_topic(2 if layout == "shared" else writers, layout)
        outcomes: dict[str, str] = {}

        def write(index: int) -> None:
            partitions = [0, 1] if layout == "shared" else [index]
            outcomes[f"w{index}"] = commit_rounds(
                broker, topic, f"w{index}", partitions, rounds, abandon_every, reopen_every
            )

        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stuck = sorted(f"{name} {outcome}" for name, outcome in outcomes.items() if outcome != "ok")
        if not stuck:
            return "ok"
        same = commit_rounds(broker, topic, "fresh", [0, 1] if layout == "shared" else [0], 1)
        other = commit_rounds(broker, broker.create_topic(2, "other"), "other", [0, 1], 1)
        log = (Path(scratch) / "tansu.log").read_text(errors="replace")
        warnings = [line for line in log.splitlines() if "WARN" in line]
        return (
            f"WEDGED ({'; '.join(stuck)}); a fresh writer there: {same}; on another topic: {other}; "
            f"the broker logged {len(warnings)} warning(s){': ' + warnings[0] if warnings else ''}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--abandon-every", type=int, default=0, help="leave every Nth transaction open")
    parser.add_argument("--reopen-every", type=int, default=0, help="close and restart a writer every N")
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    args = parser.parse_args()
    wedged = dict.fromkeys(args.layouts, 0)
    for number in range(1, args.trials + 1):
        for layout in args.layouts:
            started = time.monotonic()
            outcome = trial(layout, args.writers, args.rounds, args.abandon_every, args.reopen_every)
            wedged[layout] += outcome != "ok"
            print(f"trial {number} {layout}: {outcome} ({time.monotonic() - started:.1f} s)", flush=True)
    transactions = args.trials * args.writers * args.rounds
    for layout, count in wedged.items():
        print(f"{layout}: {count} of {args.trials} trials wedged ({transactions:,} transactions)")


if __name__ == "__main__":
    main()
