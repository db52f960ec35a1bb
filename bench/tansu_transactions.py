"""How often concurrent Kafka transactions wedge a partition of the tests' broker.

tansu 0.6.0 holds a committed transaction until the transactions that wrote
to the same partitions meanwhile have ended. Under concurrent commits it can
end up holding a partition for good: from then on no transaction that writes
to that partition shows, whoever writes it (a new transactional id included),
while other topics go on. A job's `KafkaSink` then waits for its marker,
fails after `transaction.timeout.ms`, restarts and waits again.

Each trial starts a broker, and `--writers` transactional producers (threads)
commit `--rounds` transactions each, as the sink does
(`tests.kafka_broker.commit_like_a_sink`): begin, 20 records, the marker (an
offset of a group named as the transactional id), commit, then wait until the
marker shows; with `--restart-every N` each closes its producer and starts a
new one of the same id every N transactions, as a relaunched job's writers do.
A trial is wedged when a marker does not show within 10 s; then a fresh
producer writes one transaction to the same topic, and one to a new topic, to
tell a wedged partition from a stopped broker.
Two layouts, in the same run:

- `shared`: every writer writes both partitions of a 2-partition topic (a
  sink partitioned by key);
- `own`: writer i writes partition i only (`KafkaSink(partitioning="subtask")`,
  what the tests' Kafka jobs use).

    .venv/bin/python bench/tansu_transactions.py [--trials N] [--writers W] [--rounds R]
        [--restart-every N] [--layouts shared own]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.kafka_broker import commit_like_a_sink, kafka_broker  # noqa: E402

LAYOUTS = ("shared", "own")


def trial(layout: str, writers: int, rounds: int, restart_every: int) -> str:
    with tempfile.TemporaryDirectory() as scratch, kafka_broker(Path(scratch) / "tansu.log") as broker:
        topic = broker.create_topic(2 if layout == "shared" else writers, layout)
        outcomes: dict[str, str] = {}

        def write(index: int) -> None:
            partitions = [0, 1] if layout == "shared" else [index]
            outcomes[f"w{index}"] = commit_like_a_sink(
                broker, topic, f"w{index}", partitions, rounds, restart_every=restart_every
            )

        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stuck = sorted(f"{name} {outcome}" for name, outcome in outcomes.items() if outcome != "ok")
        if not stuck:
            return "ok"
        same = commit_like_a_sink(broker, topic, "fresh", [0, 1] if layout == "shared" else [0], 1)
        other = commit_like_a_sink(broker, broker.create_topic(2, "other"), "other", [0, 1], 1)
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
    parser.add_argument(
        "--restart-every", type=int, default=0, help="each writer restarts every N transactions"
    )
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    args = parser.parse_args()
    wedged = dict.fromkeys(args.layouts, 0)
    for number in range(1, args.trials + 1):
        for layout in args.layouts:
            started = time.monotonic()
            outcome = trial(layout, args.writers, args.rounds, args.restart_every)
            wedged[layout] += outcome != "ok"
            print(f"trial {number} {layout}: {outcome} ({time.monotonic() - started:.1f} s)", flush=True)
    transactions = args.trials * args.writers * args.rounds
    for layout, count in wedged.items():
        print(f"{layout}: {count} of {args.trials} trials wedged ({transactions:,} transactions)")


if __name__ == "__main__":
    main()
