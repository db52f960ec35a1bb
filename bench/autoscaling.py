"""The autoscaler against a load step, beside Flink's algorithm on the same series.

The autoscaled job of the suite's scenario (tests/runtime/autoscaling/
test_autoscaling_on_kafka.py): `tests.jobs.kafka_sums:costly_running_sum`, a
Kafka source (4 partitions, on a tansu broker this benchmark starts) keyed into a
running sum that takes 50 ms a record (a subtask processes about 20 records/s),
written to files; the in-process runner (`lockgate run --local`'s: the same job
master, checkpoints and rescale in place, its tasks threads of this process) with
the driver's autoscaler loop beside it, in compressed time (windows of seconds).
Offered load: LOW records/s (about half of what P = 1 processes) for LOW_S, a
step to HIGH (three times what P = 1 processes) held for HIGH_S, then LOW again
until the scale-down and AFTER_S more.

Sampled each second: the offered rate, the backlog (the sum of the source
subtasks' backlogs in their last published progress), the running parallelism
(none while a rescale pauses the job) and the autoscaler's decision. Reported:
the time from the load step until the backlog is back under target — at most one
second of the offered input (what a source that keeps up has not fetched yet),
the point from which the decision sizes for the input rate alone — the rescales,
the records processed twice (the committed output checked exactly: each record
once, every key's sum right), and Flink's algorithm (`flink_reference.py`) on
the same recorded series: at each sample the parallelism it would pick, its time
settings the autoscaler's (its own defaults are minutes to an hour). What it
picks there is a shadow of a job that ran at the autoscaler's parallelism; the
rescales each algorithm would make on its own are counted on the suite's load
model (tests/runtime/autoscaling/load_model.py) calibrated to the run (the
measured records per busy second of the keyed chain, the measured pause), for
Flink's algorithm with the same time settings and with its defaults compressed 20
times as the autoscaler's window is (60 s -> 3 s).

    .venv/bin/python bench/autoscaling.py [--runs N] [--plot docs/img/autoscaling.svg]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from lockgate.runtime import read_committed
from lockgate.runtime.autoscaling.decision import Decision, ScalingPolicy, ScalingState, decide
from lockgate.runtime.autoscaling.flink_reference import FlinkDefaults, FlinkState, flink_decide
from lockgate.runtime.autoscaling.loop import Autoscaler
from lockgate.runtime.autoscaling.samples import load_sample
from lockgate.runtime.autoscaling.series import IncompleteMetricsError, LoadSample, measure
from lockgate.runtime.clock import SystemClock
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.job_requests import await_savepoint, request_savepoint
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.engine.job_master import JobMaster
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from plots import autoscaling_plot  # noqa: E402

from tests.exactness import assert_running_sums_exact  # noqa: E402
from tests.kafka_broker import QUIET, KafkaBroker, kafka_broker  # noqa: E402
from tests.runtime.autoscaling import load_model  # noqa: E402

COST_MS, KEYS, PARTITIONS, KEY_GROUPS = 50, 101, 4, 32
LOW, HIGH = 10, 60  # records/s: half of what P = 1 processes, and three times
LOW_S, HIGH_S, AFTER_S, LOW_AT_MOST_S = 30, 45, 20, 90
POLICY = ScalingPolicy(  # the suite scenario's
    max_parallelism=8,
    key_groups=KEY_GROUPS,
    window_s=3.0,
    stabilization_s=1.5,
    catch_up_s=10.0,
    scale_down_delay_s=5.0,
)
FLINK_SAME_TIMES = FlinkDefaults(
    key_groups=KEY_GROUPS,
    max_parallelism=POLICY.max_parallelism,
    catch_up_s=POLICY.catch_up_s,
    restart_s=0.0,  # as the autoscaler's before its first rescale; both take the measured pause after
    window_s=POLICY.window_s,
    stabilization_s=POLICY.stabilization_s,
    scale_down_interval_s=POLICY.scale_down_delay_s,
    backlog_threshold_s=POLICY.catch_up_s / 6,  # its default's share of the catch-up (300 s of 1800 s)
)
COMPRESSION = 20  # the autoscaler's window, 60 s by default, is 3 s here
FLINK_DEFAULTS_COMPRESSED = dataclasses.replace(
    FlinkDefaults(key_groups=KEY_GROUPS, max_parallelism=POLICY.max_parallelism),
    catch_up_s=1800 / COMPRESSION,
    restart_s=300 / COMPRESSION,
    window_s=900 / COMPRESSION,
    stabilization_s=300 / COMPRESSION,
    scale_down_interval_s=3600 / COMPRESSION,
    backlog_threshold_s=300 / COMPRESSION,
)
MODEL_LOW_S = 400  # the model's low load after the step: long enough for the compressed defaults' delay


def offered_rate(t: float) -> int:
    return HIGH if LOW_S <= t < LOW_S + HIGH_S else LOW


def offered_by(t: float) -> float:
    """Records offered from 0 to `t` seconds."""
    high = min(max(t - LOW_S, 0.0), HIGH_S)
    return LOW * (t - high) + HIGH * high


@dataclasses.dataclass
class Row:
    t: float
    offered: int
    parallelism: int | None
    backlog: int | None
    action: str | None
    recommended: int | None


@dataclasses.dataclass
class Measured:
    rows: list[Row]
    series: list[LoadSample]
    rescales: list[dict[str, Any]]
    total: int
    twice: int
    started: float
    load_average: list[float] = dataclasses.field(default_factory=list)
    """The machine's 1-minute load average at the start and at the end."""


def offer(broker: KafkaBroker, topic: str, started: float, stop: threading.Event, sent: list[int]) -> None:
    """Record n (`{"key": n % KEYS, "n": n}`, partition n % 4) by the profile until `stop`."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5, **QUIET})
    n = 0
    while not stop.is_set():
        due = offered_by(time.time() - started)
        while n < int(due):
            value = json.dumps({"key": n % KEYS, "n": n}).encode()
            producer.produce(topic, value, partition=n % PARTITIONS)
            n += 1
        sent[0] = n
        producer.poll(0)
        time.sleep(0.02)  # the offered rate's clock
    assert producer.flush(30) == 0


async def sample(
    store: InMemoryStore, master: JobMaster, autoscaler: Autoscaler, started: float, measured: Measured
) -> None:
    """Each second: the offered rate, the backlog, the parallelism and the decision."""
    tick = 0
    while True:
        tick += 1
        await asyncio.sleep(max(0.0, started + tick - time.time()))
        t = time.time() - started
        running = master.running
        backlog = None
        if running is not None:
            launch, parallelism = running
            records = [v for _, v in await store.get_prefix(master.spec.keys.progress_of_launch(launch))]
            load = load_sample(records, parallelism)
            if load is not None:
                if not measured.series or load.at_s > measured.series[-1].at_s:
                    measured.series.append(load)
                backlogs = [s.backlog for s in load.subtasks if s.source]
                backlog = None if None in backlogs else sum(b or 0 for b in backlogs)
        last = autoscaler.last
        measured.rows.append(
            Row(
                round(t, 2),
                offered_rate(t),
                None if running is None else running[1],
                backlog,
                None if last is None else last.action,
                None if last is None else last.recommended,
            )
        )


def _committed(url: str) -> int:
    try:
        return len(read_committed(url))
    except FileNotFoundError:
        return 0


async def until(condition: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} in {timeout_s:g} s")
        await asyncio.sleep(0.1)


async def run_once(broker: KafkaBroker, work: Path) -> Measured:
    topic = broker.create_topic(PARTITIONS, "offered")
    out = f"file://{work}/out"
    store = InMemoryStore()
    args = {"bootstrap": broker.bootstrap_servers, "input": topic, "output": out, "cost_ms": str(COST_MS)}
    spec = JobSpec(
        "tests.jobs.kafka_sums:costly_running_sum",
        JobKeys("bench", "autoscaling"),
        1,
        StateConfig("heap", work / "local", KEY_GROUPS),
        store,
        secret=b"s" * 32,
        args=tuple(args.items()),
        batch_size=8,  # as the scenario's: a batch of 512 is 25 s of the costly stage
    )
    storage = CheckpointStorage(f"file://{work}/checkpoints")
    config = CheckpointConfig(interval_s=1.0, timeout_s=30)
    master = JobMaster(spec, ThreadStage(), storage, config, savepoint_dir=f"file://{work}/savepoints")
    autoscaler = Autoscaler(store, spec.keys, POLICY, master, SystemClock(), interval_s=0.5)
    started = time.time()
    measured = Measured([], [], [], 0, 0, started, [os.getloadavg()[0]])
    stop, sent = threading.Event(), [0]
    run = asyncio.create_task(master.run(restart_strategy("none")))
    offering = asyncio.create_task(asyncio.to_thread(offer, broker, topic, started, stop, sent))
    scaling = asyncio.create_task(autoscaler.run())
    sampling = asyncio.create_task(sample(store, master, autoscaler, started, measured))
    try:

        def over() -> bool:
            # A scale-down before the drop (the machine slowed the low load's subtask) is no end.
            drop_ms = (started + LOW_S + HIGH_S) * 1000
            downs = [h for h in autoscaler.history if h.action == "scale-down" and h.at_ms >= drop_ms]
            now = time.time() - started
            after_down = bool(downs) and now >= downs[-1].at_ms / 1000 - started + AFTER_S
            return run.done() or after_down or now >= LOW_S + HIGH_S + LOW_AT_MOST_S

        await until(over, "end of the profile", LOW_S + HIGH_S + LOW_AT_MOST_S + 30)
        stop.set()
        await offering
        measured.total = sent[0]
        sampling.cancel()
        await until(lambda: _committed(out) >= measured.total or run.done(), "full output", 120)
        scaling.cancel()  # the input has ended: the stop is no load drop
        await asyncio.gather(scaling, return_exceptions=True)
        request = await request_savepoint(store, spec.keys, stop=True, expires_in_s=30)
        stopped = await await_savepoint(store, spec.keys, request, 60)
        assert stopped.status == "completed", stopped
        result = await asyncio.wait_for(run, 30)
        measured.load_average.append(os.getloadavg()[0])
    finally:
        stop.set()
        for task in (scaling, sampling):
            task.cancel()
        await asyncio.gather(scaling, sampling, offering, return_exceptions=True)
    assert result.restarts == 0, result
    output = read_committed(out)
    measured.twice = sum(1 for k in Counter(r["n"] for r in output).values() if k > 1)
    assert_running_sums_exact(output, measured.total, KEYS)
    measured.rescales = [{**h.to_json(), "t": round(h.at_ms / 1000 - started, 2)} for h in autoscaler.history]
    return measured


def drained_after_step(rows: list[Row]) -> float | None:
    """Seconds from the step until the backlog is at most a second of the offered input
    again, after it was more (the first sample from which it stays so for 3 s); 0.0
    when it never was more; None when it never came back."""
    after = [r for r in rows if r.t >= LOW_S]
    behind = next((i for i, r in enumerate(after) if r.backlog is not None and r.backlog > r.offered), None)
    if behind is None:
        return 0.0
    for i in range(behind, len(after)):
        stays = after[i : i + 3]
        if len(stays) == 3 and all(r.backlog is not None and r.backlog <= r.offered for r in stays):
            return round(after[i].t - LOW_S, 1)
    return None


def flink_shadow(measured: Measured, policy: FlinkDefaults) -> list[tuple[float, int | None]]:
    """Flink's algorithm at each recorded sample, on the series as the job ran it: its
    state follows the job's launches (a new launch starts it afresh at the running
    parallelism, as the autoscaler's loop does); per sample the parallelism it would
    pick (None: it took no decision, metrics incomplete)."""
    picks: list[tuple[float, int | None]] = []
    state: FlinkState | None = None
    for index, load in enumerate(measured.series):
        if state is None or load.parallelism != state.parallelism or _restarted(measured.series, index):
            state = FlinkState(load.parallelism, load.at_s)
        decision, following = flink_decide(measured.series[: index + 1], policy, state, load.at_s)
        if decision.action == "hold":
            state = following  # a delayed scale-down goes on; an acted one would restart the launch
        picks.append(
            (
                round(load.at_s - measured.started, 2),
                None if decision.action == "not-taken" else decision.parallelism,
            )
        )
    return picks


def _restarted(series: list[LoadSample], index: int) -> bool:
    """A new launch at the same parallelism (a rescale refused is none): counters back to 0."""
    if index == 0:
        return False
    before = {(s.vertex, s.subtask): s.records_in for s in series[index - 1].subtasks}
    return any(s.records_in < before.get((s.vertex, s.subtask), 0) for s in series[index].subtasks)


def keyed_rate(measured: Measured) -> float:
    """Records the keyed chain processes per busy second per subtask at P = 1, in the
    low load before the step (the median over its windows)."""
    rates = []
    for load in measured.series:
        if load.at_s - measured.started >= LOW_S or load.parallelism != 1:
            continue
        try:
            window = measure(
                measured.series,
                parallelism=1,
                since_s=measured.started + 5,
                window_s=POLICY.window_s,
                now_s=load.at_s,
            )
        except IncompleteMetricsError:
            continue
        rates += [c.true_rate for c in window.chains if not c.source and c.true_rate is not None]
    return statistics.median(rates)


def on_the_model(measured: Measured) -> dict[str, Any]:
    """Each algorithm on its own, on the load model calibrated to this run: the model's
    keyed chain processes 1000 records per busy second, so the profile is scaled by
    1000 / the measured rate; a rescale pauses the job for the measured pause."""
    scale = load_model.KEYED_RATE / keyed_rate(measured)
    pauses = [float(r["detail"].split()[1]) for r in measured.rescales if r["outcome"] == "rescaled"]
    pause_s = max(1, round(statistics.median(pauses))) if pauses else 1
    until_s = LOW_S + HIGH_S + MODEL_LOW_S

    def profile(t: float) -> float:
        return offered_rate(t) * scale

    def ours() -> load_model.Decide:
        state = ScalingState(1, 0.0)
        policy = dataclasses.replace(POLICY, restart_s=pause_s)

        def step(samples: list[LoadSample], now_s: float) -> Decision:
            nonlocal state
            decision = decide(samples, policy, state, now_s)
            state = decision.state
            return decision

        return step

    def flink(policy: FlinkDefaults) -> load_model.Decide:
        state = FlinkState(1, 0.0)

        def step(samples: list[LoadSample], now_s: float) -> Decision:
            nonlocal state
            decision, state = flink_decide(samples, policy, state, now_s)
            return decision

        return step

    same = dataclasses.replace(FLINK_SAME_TIMES, restart_s=pause_s)
    deciders = {
        "lockgate": ours(),
        "flink-same-times": flink(same),
        "flink-defaults/20": flink(FLINK_DEFAULTS_COMPRESSED),
    }
    results: dict[str, Any] = {"scale": round(scale, 2), "pause_s": pause_s}
    for name, decider in deciders.items():
        model = load_model.simulate(
            profile, decider, parallelism=1, until_s=until_s, decide_every_s=1, pause_s=pause_s, kept_s=200
        )
        offered = [profile(t) for t in range(1, until_s + 1)]
        rows = [
            Row(t, round(o), p, round(b), None, None)
            for t, (o, p, b) in enumerate(zip(offered, model.parallelism, model.backlog, strict=True), 1)
        ]
        results[name] = {
            "rescales": [(d.action, d.parallelism, round(d.at_s - LOW_S, 1)) for d in model.rescales],
            "drained_s": drained_after_step(rows),
            "peak_backlog_s": round(max(model.backlog) / scale / HIGH, 1),
        }
    return results


def report(measured: Measured) -> dict[str, Any]:
    rows = measured.rows
    rescales = measured.rescales
    shadow = flink_shadow(measured, FLINK_SAME_TIMES)
    ups = [(round(t - LOW_S, 1), p) for t, p in shadow if p is not None and t >= LOW_S and p > 1]
    drop = LOW_S + HIGH_S
    downs = [
        (round(t - drop, 1), p, load.parallelism)
        for (t, p), load in zip(shadow, measured.series, strict=True)
        if p is not None and t >= drop and p < load.parallelism
    ]
    backlogs = [r.backlog for r in rows if r.backlog is not None]
    return {
        "load_average": measured.load_average,
        "drained_s": drained_after_step(rows),
        "peak_backlog": max(backlogs, default=None),
        "rescales": [
            (r["action"], r["fromParallelism"], r["toParallelism"], round(r["t"] - LOW_S, 1), r["detail"])
            for r in rescales
        ],
        "records": measured.total,
        "twice": measured.twice,
        "flink_shadow_first_up": ups[0] if ups else None,
        "flink_shadow_first_down": downs[0] if downs else None,
        "flink_shadow_picks": sorted(
            Counter(p for _, p in shadow).items(), key=lambda kv: (kv[0] is None, kv[0] or 0)
        ),
        "model": on_the_model(measured),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--plot", type=Path, help="write the last run's SVG plot here")
    parser.add_argument("--record", type=Path, help="write each run's samples as JSON lines here")
    arguments = parser.parse_args()
    reports = []
    with tempfile.TemporaryDirectory(prefix="bench-autoscaling-") as directory:
        work = Path(directory)
        with kafka_broker(work / "tansu.log") as broker:
            for index in range(arguments.runs):
                measured = asyncio.run(run_once(broker, work / f"run-{index}"))
                reports.append(report(measured))
                print(json.dumps({"run": index + 1, **reports[-1]}), flush=True)
                if arguments.record is not None:
                    with arguments.record.open("a") as record:
                        record.write(
                            json.dumps(
                                {
                                    "rows": [dataclasses.asdict(r) for r in measured.rows],
                                    "rescales": measured.rescales,
                                    "shadow": flink_shadow(measured, FLINK_SAME_TIMES),
                                }
                            )
                            + "\n"
                        )
    if arguments.plot is not None:
        shadow = flink_shadow(measured, FLINK_SAME_TIMES)
        arguments.plot.write_text(
            autoscaling_plot(
                [(r.t, r.offered, r.backlog, r.parallelism) for r in measured.rows],
                [(r["t"], r["toParallelism"]) for r in measured.rescales],
                shadow,
            )
        )
    drained = [r["drained_s"] for r in reports if r["drained_s"] is not None]
    median = statistics.median(drained) if drained else None
    print(
        f"median of {len(reports)}: drained {median} s after the step, "
        f"rescales {statistics.median(len(r['rescales']) for r in reports)}, "
        f"records twice {sum(r['twice'] for r in reports)}"
    )


if __name__ == "__main__":
    main()
