"""The fault soak: rounds of appended input and scheduled faults against a real job,
each round checked exactly against the reference once the job has recovered.

A round: input is appended for `window_s` while its faults fire at their times;
every fault is healed; then the job must recover within `recovery_bound_s`: one
driver left, running and coordinating, a checkpoint completed after the faults,
every appended record committed. Then the committed output must be exactly the
reference (every record once, every running sum right) and so must the state of
the latest checkpoint (each key's total for the input its sources had read).
A round that does not recover in time is a hang; its logs are kept.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from lockgate.runtime.snapshot.storage import SnapshotCorruptError

from tests.faults.exchange_partition import ExchangeProxies
from tests.faults.injectors import RESCALE_WAIT_S, TAKEOVER_WAIT_S, FaultContext, Injection, run_fault
from tests.faults.schedule import CLASS_OF, CLASSES, KINDS, Fault, Schedule
from tests.faults.soak_cluster import JobOptions, SoakCluster
from tests.faults.soak_reference import (
    SoakInput,
    committed,
    committed_by,
    output_problems,
    read_checkpoint_state,
    state_problems,
)

Outcome = Literal["ok", "divergence", "hang"]
_POLL_S = 0.5
_APPEND_EVERY_S = 0.1
_INJECTOR_SLACK_S = 30.0  # an injector's own waits beyond its hold (a target to appear, etcd to answer)


@dataclass(frozen=True)
class SoakOptions:
    rate: float = 300.0  # records appended per second during a round's window
    recovery_bound_s: float = 180.0
    partition_bound_s: float = 30.0
    stop_on_failure: bool = True
    startup_bound_s: float = 180.0

    @property
    def longest_hold_s(self) -> float:
        """The longest a fault holds: a takeover waits for the replacement, a partition
        for its bound, a rescale for its answer."""
        return max(TAKEOVER_WAIT_S, RESCALE_WAIT_S, self.partition_bound_s)

    def round_bound_s(self, window_s: float) -> float:
        """The longest a round may take (and the checks after it): its window, the
        longest fault hold with the injectors' slack, the recovery bound."""
        return window_s + self.longest_hold_s + _INJECTOR_SLACK_S + self.recovery_bound_s


@dataclass
class RoundResult:
    index: int
    injections: list[Injection]
    hangs: list[str] = field(default_factory=list)  # what did not happen within its bound
    divergences: list[str] = field(default_factory=list)  # where output or state is not the reference
    seconds: float = 0.0
    recovery_s: float = 0.0
    records: int = 0
    events: list[str] = field(default_factory=list)

    @property
    def outcome(self) -> Outcome:
        return "divergence" if self.divergences else "hang" if self.hangs else "ok"

    @property
    def problems(self) -> list[str]:
        return self.divergences + self.hangs

    def to_json(self) -> dict[str, Any]:
        return {
            "round": self.index,
            "outcome": self.outcome,
            "divergences": self.divergences,
            "hangs": self.hangs,
            "seconds": round(self.seconds, 1),
            "recovery_s": round(self.recovery_s, 1),
            "records": self.records,
            "faults": [
                {"kind": i.fault.kind, "at_s": i.fault.at_s, "injected": i.injected, "detail": i.detail}
                for i in self.injections
            ],
            "events": self.events,
        }


@dataclass
class SoakReport:
    schedule: Schedule
    rounds: list[RoundResult] = field(default_factory=list)
    seconds: float = 0.0
    startup_problem: str | None = None

    @property
    def failures(self) -> list[RoundResult]:
        return [r for r in self.rounds if r.outcome != "ok"]

    @property
    def passed(self) -> bool:
        return self.startup_problem is None and not self.failures

    def injected(self) -> Counter[str]:
        return Counter(i.fault.kind for r in self.rounds for i in r.injections if i.injected)

    def summary(self) -> str:
        kinds = self.injected()
        classes: Counter[str] = Counter()
        for kind, count in kinds.items():
            classes[CLASS_OF[kind]] += count
        planned = Counter(i.fault.kind for r in self.rounds for i in r.injections)
        lines = [
            f"seed {self.schedule.seed}: {len(self.rounds)} round(s), {sum(kinds.values())} fault(s) injected "
            f"({sum(planned.values()) - sum(kinds.values())} found no target), "
            f"{sum(r.records for r in self.rounds):,} records, {self.seconds:.0f} s",
            f"{'class':<11} {'kind':<23} {'injected':>8}",
        ]
        for cls in CLASSES:
            for kind in KINDS[cls]:
                if planned[kind]:
                    lines.append(f"{cls:<11} {kind:<23} {kinds[kind]:>8}")
            if planned and any(planned[k] for k in KINDS[cls]):
                lines.append(f"{cls:<11} {'(class total)':<23} {classes[cls]:>8}")
        divergences = sum(bool(r.divergences) for r in self.rounds)  # rounds with any
        hangs = sum(bool(r.hangs) for r in self.rounds)
        durations = [r.seconds for r in self.rounds] or [0.0]
        lines.append(
            f"divergences {divergences}, hangs {hangs}; round time mean {sum(durations) / len(durations):.0f} s, "
            f"max {max(durations):.0f} s"
        )
        if self.startup_problem:
            lines.append(f"the job never started: {self.startup_problem}")
        for failed in self.failures:
            lines.append(f"round {failed.index} {failed.outcome.upper()}: " + " | ".join(failed.problems))
        return "\n".join(lines)


class Soak:
    def __init__(
        self,
        work: Path,
        schedule: Schedule,
        options: SoakOptions | None = None,
        job: JobOptions | None = None,
        say: Callable[[str], None] = print,
    ) -> None:
        self.work = work
        self.schedule = schedule
        self.options = options or SoakOptions()
        self.say = say
        job = job or JobOptions()
        if any(f.cls == "kafka" for faults in schedule.rounds for f in faults):
            job = replace(job, kafka=True)  # its faults are the Kafka sink's
        self.cluster = SoakCluster(work, job)
        self.input = SoakInput(
            str(work / "input"), self.cluster.options.keys, self.cluster.options.partitions
        )
        self.report = SoakReport(schedule)

    def run(self) -> SoakReport:
        started = time.monotonic()
        self.schedule.save(self.work / "schedule.json")
        proxies = ExchangeProxies(
            lambda: [p for d in self.cluster.alive_drivers() for p in d.spark.task_workers()]
        )
        self.cluster.start()
        try:
            self.input.append(int(self.options.rate))
            problem = self._recovered(time.monotonic() + self.options.startup_bound_s, 0)
            if problem is not None:
                self.report.startup_problem = problem
                self._keep_logs("startup", {"problem": problem})
                return self.report
            ctx = FaultContext(self.cluster, proxies, self.options.partition_bound_s)
            for index, faults in enumerate(self.schedule.rounds):
                result = self._round(index, faults, ctx)
                self.report.rounds.append(result)
                with (self.work / "rounds.jsonl").open("a") as log:
                    log.write(json.dumps(result.to_json()) + "\n")
                self.say(self._line(result))
                if result.outcome != "ok":
                    self._keep_logs(f"round-{index}", result.to_json())
                    if self.options.stop_on_failure:
                        break
        finally:
            proxies.close()
            self.cluster.stop()
            self.report.seconds = time.monotonic() - started
        return self.report

    def _line(self, result: RoundResult) -> str:
        faults = ", ".join(f"{i.fault.kind}{'' if i.injected else ' (no target)'}" for i in result.injections)
        text = f"round {result.index}: {result.outcome} in {result.seconds:.0f} s [{faults}]"
        return text + ("" if result.outcome == "ok" else " — " + " | ".join(result.problems))

    def _round(self, index: int, faults: tuple[Fault, ...], ctx: FaultContext) -> RoundResult:
        result = RoundResult(index, [Injection(f) for f in faults])
        events_before = len(self.cluster.events)
        start = time.monotonic()
        threads = [
            threading.Thread(target=run_fault, args=(ctx, injection, start), daemon=True)
            for injection in result.injections
        ]
        for thread in threads:
            thread.start()
        self._append_for(self.schedule.window_s, start)
        hold_bound = start + self.schedule.window_s + self.options.longest_hold_s + _INJECTOR_SLACK_S
        for thread in threads:
            thread.join(timeout=max(0.0, hold_bound - time.monotonic()))
        stuck = [i.fault.kind for i, t in zip(result.injections, threads, strict=True) if t.is_alive()]
        self._heal(ctx)
        healed = time.monotonic()
        latest = self.cluster.latest()
        problem = self._recovered(
            healed + self.options.recovery_bound_s, latest.checkpoint_id if latest else 0
        )
        result.recovery_s = time.monotonic() - healed
        result.hangs += [f"injector still running: {kind}" for kind in stuck]
        result.hangs += [i.hang for i in result.injections if i.hang is not None]
        if problem is not None:
            result.hangs.append(problem)
        result.divergences += self._check(recovered=problem is None)
        orphans = self.cluster.kill_orphans()
        if orphans:
            self.cluster.events.append(f"killed processes left behind by exited drivers: {orphans}")
        result.events = self.cluster.events[events_before:]
        result.records = self.input.total
        result.seconds = time.monotonic() - start
        return result

    def _append_for(self, window_s: float, start: float) -> None:
        batch = max(1, int(self.options.rate * _APPEND_EVERY_S))
        ticks = int(window_s / _APPEND_EVERY_S)
        for tick in range(ticks):
            self.input.append(batch)
            delay = start + (tick + 1) * _APPEND_EVERY_S - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the input's pace

    def _heal(self, ctx: FaultContext) -> None:
        ctx.resume_all()
        ctx.proxies.heal()
        self.cluster.storage.clear()
        self.cluster.etcd.ensure_running()

    def _recovered(self, deadline: float, checkpoint_before: int) -> str | None:
        """None once the job recovered and stays so; else, at `deadline`, what it had
        not done. Recovered twice in a row, with a checkpoint completed in between and
        no restart: tasks of a failed launch that linger can make a job look
        recovered for a moment, before the relaunch replays over them."""
        missing: list[str] = []
        steady: tuple[int, int] | None = None  # (restarts, latest checkpoint) when first recovered
        while time.monotonic() < deadline:
            missing = self._not_yet_recovered(checkpoint_before)
            status, latest = self.cluster.status(), self.cluster.latest()
            if missing or status is None or latest is None:
                steady = None
            elif steady is None:
                steady = (status.restarts, latest.checkpoint_id)
            elif status.restarts != steady[0]:
                steady = None
            elif latest.checkpoint_id > steady[1]:
                return None
            time.sleep(_POLL_S)  # polling the job's progress
        return "not recovered within the bound: " + "; ".join(missing or ["restarts did not settle"])

    def _not_yet_recovered(self, checkpoint_before: int) -> list[str]:
        cluster = self.cluster
        missing = []
        alive = [d.name for d in cluster.alive_drivers()]
        if len(alive) != 1:
            missing.append(f"drivers alive: {alive} (expected one)")
        status = cluster.status()
        if status is None or status.state != "running" or [status.driver] != alive:
            missing.append(f"job status {status}")
        latest = cluster.latest()
        if latest is None or latest.checkpoint_id <= checkpoint_before:
            missing.append(f"no checkpoint completed after {checkpoint_before}")
        count = len(committed(cluster.output_url))
        if count < self.input.total:
            missing.append(f"{count} of {self.input.total} records committed")
        if cluster.kafka is not None and (in_kafka := len(cluster.kafka_committed())) < self.input.total:
            missing.append(f"{in_kafka} of {self.input.total} records committed to Kafka")
        return missing

    def _check(self, recovered: bool) -> list[str]:
        """Divergences from the reference. When the job did not recover (a hang),
        records not committed yet are not missing, and the latest checkpoint may be
        one a fault corrupted that no newer one replaced: only the output is checked."""
        records = committed(self.cluster.output_url)
        damaged = self.cluster.ever_marked_unusable()
        if damaged is None:
            return ["etcd did not answer which checkpoints were found damaged"]
        replayed = committed_by(self.cluster.output_url, damaged)
        problems = output_problems(records, self.input.total, self.input.keys, recovered, replayed)
        if self.cluster.kafka is not None:
            # Both sinks follow the same chain, so an epoch holds the same records in each.
            kafka = self.cluster.kafka_committed()
            in_kafka = output_problems(kafka, self.input.total, self.input.keys, recovered, replayed)
            problems += [f"Kafka: {problem}" for problem in in_kafka]
        if not recovered:
            return problems
        for _ in range(3):  # retention may delete the latest between asking and reading
            latest = self.cluster.latest()
            if latest is None:
                return [*problems, "no completed checkpoint"]
            try:
                state = read_checkpoint_state(latest.path, self.input.keys)
            except FileNotFoundError:
                continue
            except SnapshotCorruptError as error:
                return [*problems, f"the latest checkpoint {latest.checkpoint_id} is unreadable: {error}"]
            return problems + state_problems(state, self.input)
        return [*problems, "the latest checkpoint kept disappearing while read"]

    def _keep_logs(self, name: str, details: dict[str, Any]) -> None:
        """The schedule, the round's record and every log, to replay and diagnose it."""
        target = self.work / "failures" / name
        target.mkdir(parents=True, exist_ok=True)
        (target / "round.json").write_text(json.dumps(details, indent=1))
        shutil.copy(self.work / "schedule.json", target / "schedule.json")
        for log in [*(self.work / "logs").glob("*.log"), self.work / "etcd.log"]:
            if log.exists():
                shutil.copy(log, target / log.name)
        self.say(f"logs of {name} kept in {target}")
