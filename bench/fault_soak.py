"""The fault soak: a randomized, seeded schedule of faults against the running-sum
job on Spark `local-cluster` (executors in their own JVMs) with an external etcd,
the committed output and the latest checkpoint's state checked exactly against
the reference after every round (tests/faults/soak.py says what a round is).

Fault classes: worker, executor and driver (SIGKILL; SIGSTOP/SIGCONT, the driver's
past its lease, with or without a replacement driver taking over); etcd (SIGKILL,
SIGSTOP, restart); storage through `faulty://` (EIO on write, rename, delete;
ENOSPC; slow uploads); a partition of the exchange through blackholing proxies;
the latest checkpoint corrupted on disk (a byte flipped, a file truncated); a late
Kafka writer of an earlier launch (a relaunch's writer held before it starts while
its driver stalls and a replacement commits past the same checkpoint; the job
then also writes its sums to a Kafka topic of a broker of the soak's own, checked
exactly like the files); an in-place rescale of the running job (`lockgate rescale`
between 1 and 2), alone or with the driver killed, etcd paused or a task worker
killed at one of its steps, drawn from the fault's seed (tests/faults/rescale_steps.py:
taken up, stop checkpoint triggered, stop checkpoint completed, relaunched, the
relaunch's first checkpoint completed).

    .venv/bin/python bench/fault_soak.py --seed 14 --rounds 60 --faults-per-round 4

Exit 0 when every round recovered within its bound and matched the reference;
1 on any divergence or hang (the schedule and the failing round's logs are kept
under WORK/failures/). Replay: the same --seed and options, or --schedule FILE
(a saved schedule.json, possibly cut down to the failing round).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.faults.schedule import CLASSES, Schedule, plan  # noqa: E402
from tests.faults.soak import Soak, SoakOptions  # noqa: E402
from tests.faults.soak_cluster import JobOptions  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--faults-per-round", type=int, default=4)
    parser.add_argument("--window", type=float, default=8.0, help="seconds of input (and faults) per round")
    parser.add_argument("--rate", type=float, default=300.0, help="records appended per second")
    parser.add_argument(
        "--classes",
        default=",".join(CLASSES),
        help=f"comma-separated fault classes (default: all of {CLASSES})",
    )
    parser.add_argument("--kinds", help="comma-separated fault kinds, to replay one kind only")
    parser.add_argument(
        "--schedule", type=Path, help="replay this saved schedule.json instead of planning one"
    )
    parser.add_argument(
        "--recovery-bound", type=float, default=180.0, help="seconds a round may take to recover"
    )
    parser.add_argument("--partition-bound", type=float, default=30.0, help="seconds to notice a partition")
    parser.add_argument("--keep-going", action="store_true", help="do not stop at the first failing round")
    parser.add_argument(
        "--aligned-checkpoint-timeout",
        type=float,
        metavar="SECONDS",
        help="run the job with unaligned exactly-once checkpoints after this much alignment (0: always)",
    )
    parser.add_argument("--work", type=Path, help="the soak's directory (default: a new temporary one)")
    arguments = parser.parse_args()

    if arguments.schedule is not None:
        schedule = Schedule.load(arguments.schedule)
    else:
        kinds = tuple(arguments.kinds.split(",")) if arguments.kinds else None
        schedule = plan(
            arguments.seed,
            arguments.rounds,
            arguments.faults_per_round,
            arguments.window,
            tuple(arguments.classes.split(",")),
            kinds,
        )
    work = arguments.work or Path(tempfile.mkdtemp(prefix="lockgate-soak-"))
    if work.exists() and any(work.iterdir()):
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    options = SoakOptions(
        rate=arguments.rate,
        recovery_bound_s=arguments.recovery_bound,
        partition_bound_s=arguments.partition_bound,
        stop_on_failure=not arguments.keep_going,
    )
    print(
        f"soak in {work}; a round is bounded by {options.round_bound_s(schedule.window_s):.0f} s", flush=True
    )
    job = JobOptions(aligned_checkpoint_timeout_s=arguments.aligned_checkpoint_timeout)
    report = Soak(work, schedule, options, job, say=lambda line: print(line, flush=True)).run()
    print(report.summary())
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
