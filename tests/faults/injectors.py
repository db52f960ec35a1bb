"""Each fault kind of the schedule, injected into a running soak cluster and healed."""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lockgate.runtime.coordination.records import JobStatus

from tests.faults import processes
from tests.faults.checkpoint_corruption import corrupt_snapshot
from tests.faults.exchange_partition import ExchangeProxies
from tests.faults.faulty_fs import StorageFaults
from tests.faults.rescale_steps import STEPS, RescaleStep, RescaleSteps, follow, request_watched
from tests.faults.schedule import Fault
from tests.faults.soak_cluster import JOB, Driver, SoakCluster
from tests.process_tree import ancestor_in, listening_on

LEASE_S = 10.0  # the coordinator's lease: a driver paused longer has lost the job
TAKEOVER_WAIT_S = 120.0  # how long a stalled driver stays stalled for its replacement to take over
TARGET_WAIT_S = 15.0  # how long a fault waits for its target (a relaunch may be under way)
HELD_WITHIN_S = 90.0  # a launch failing at its next barrier, and its relaunch starting its writers
RESCALE_WAIT_S = 180.0  # executors reserved, the stop checkpoint, the relaunch: relaunches included


@dataclass
class Injection:
    """What became of one scheduled fault."""

    fault: Fault
    injected: bool = False
    detail: str = ""
    started: float = 0.0
    ended: float = 0.0
    hang: str | None = None  # the runtime did not notice the fault within its bound

    def note(self, text: str) -> None:
        self.detail = f"{self.detail}; {text}" if self.detail else text


@dataclass
class FaultContext:
    cluster: SoakCluster
    proxies: ExchangeProxies
    partition_bound_s: float
    # Resumed at the end of the round whatever happens (if still the same process).
    paused: set[processes.ProcessId] = field(default_factory=set)
    # The faults of the round being injected or held now, by kind (a kind at most once a round).
    holding: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def others_holding(self, kind: str) -> set[str]:
        with self.lock:
            return self.holding - {kind}

    def pause(self, pid: int) -> processes.ProcessId | None:
        process = processes.identify(pid)
        if process is not None:
            with self.lock:
                self.paused.add(process)
            processes.pause(pid)
        return process

    def resume(self, process: processes.ProcessId | None) -> None:
        if process is None:
            return
        with self.lock:
            self.paused.discard(process)
        if processes.alive(process):
            processes.resume(process[0])

    def resume_all(self) -> None:
        with self.lock:
            paused, self.paused = self.paused, set()
        for process in paused:
            if processes.alive(process):
                processes.resume(process[0])


Injector = Callable[[FaultContext, Injection, random.Random], None]


def _wait_for_targets(ctx: FaultContext, target: processes.Target) -> list[int]:
    deadline = time.monotonic() + TARGET_WAIT_S
    while not (pids := ctx.cluster.current.spark.of(target)) and time.monotonic() < deadline:
        time.sleep(0.2)  # polling the process table for a relaunched target
    return pids


def _process_fault(target: processes.Target, pause: bool) -> Injector:
    def inject(ctx: FaultContext, injection: Injection, rng: random.Random) -> None:
        pids = _wait_for_targets(ctx, target)
        if not pids:
            injection.note(f"no {target} process to signal")
            return
        pid = rng.choice(pids)
        if not pause:
            injection.injected = _between_kafka_transactions(
                ctx, injection, functools.partial(processes.kill, pid)
            )
            injection.note(f"SIGKILL {target} {pid}")
            return
        process: processes.ProcessId | None = None

        def stall() -> bool:
            nonlocal process
            process = ctx.pause(pid)
            return process is not None

        injection.injected = _between_kafka_transactions(ctx, injection, stall)
        injection.note(f"SIGSTOP {target} {pid} for {injection.fault.hold_s} s")
        time.sleep(injection.fault.hold_s)  # the length of the pause is the fault
        ctx.resume(process)

    return inject


def _between_kafka_transactions(ctx: FaultContext, injection: Injection, fault: Callable[[], bool]) -> bool:
    """Injects `fault` (returning whether it found its target) at a moment the broker
    holds no transaction of the soak's Kafka sink open (`KafkaBroker.between_transactions`
    says why), every task worker frozen while the broker is asked. A stalled worker
    stays frozen; the others go on at once."""
    kafka = ctx.cluster.kafka
    if kafka is None:
        return fault()
    found: list[bool] = []
    earlier = kafka.between_transactions(
        ctx.cluster.kafka_topic,
        ctx.cluster.current.spark.task_workers,
        lambda _: found.append(fault()),
        stays_frozen=lambda: {process[0] for process in ctx.paused},
    )
    if earlier is None:
        injection.note("a Kafka transaction was open at each of 100 tries: injected regardless")
        return fault()
    if earlier:
        injection.note(f"a Kafka transaction was open at {earlier} earlier tries")
    return found[0]


def _driver_pause_takeover(ctx: FaultContext, injection: Injection, rng: random.Random) -> None:
    """The driver stalls past its lease; a replacement takes the job over and
    completes a checkpoint (or `TAKEOVER_WAIT_S` passes); then the stalled one
    wakes up (issue 14, item 1). The hold is at least the lease."""
    old = ctx.cluster.current
    pid = next(iter(_wait_for_targets(ctx, "driver")), None)
    if pid is None:
        injection.note("no driver process to pause")
        return
    process = ctx.pause(pid)
    injection.injected = process is not None
    injection.note(f"SIGSTOP driver {pid} ({old.name})")
    _take_over(ctx, injection, checkpoints=1)
    ctx.resume(process)


def _take_over(ctx: FaultContext, injection: Injection, checkpoints: int) -> None:
    """A replacement driver is launched while the current one stalls; returns once it
    leads the job and completed `checkpoints` checkpoints (or `TAKEOVER_WAIT_S` passed)."""
    before = ctx.cluster.latest()
    replacement = ctx.cluster.launch_driver()
    injection.note(f"{replacement.name} launched")
    deadline = time.monotonic() + max(injection.fault.hold_s, TAKEOVER_WAIT_S)
    while time.monotonic() < deadline:
        status, latest = ctx.cluster.status(), ctx.cluster.latest()
        took_over = status is not None and status.driver == replacement.name
        completed = (
            0 if latest is None else latest.checkpoint_id - (0 if before is None else before.checkpoint_id)
        )
        if took_over and completed >= checkpoints and time.monotonic() - injection.started > LEASE_S:
            injection.note(
                f"{replacement.name} completed checkpoint {latest.checkpoint_id if latest else '?'}"
            )
            return
        time.sleep(0.5)  # polling etcd for the takeover
    injection.note(f"{replacement.name} had not taken over with a checkpoint after {TAKEOVER_WAIT_S} s")


def _late_kafka_writer(ctx: FaultContext, injection: Injection, _rng: random.Random) -> None:
    """A Kafka writer of an earlier launch starts late (issue 34, item 1). The hold is
    armed (tests/faults/late_writer.py): the running launch fails at a sink barrier and
    the first writer of its relaunch waits before it starts. Then that driver stalls
    past its lease with its executors (so nothing cancels the held task; its Python
    workers run on), a replacement takes the job over, restores the same checkpoint
    and completes two more; then the held writer is released — it must send nothing —
    and the stalled driver resumes."""
    cluster, hold = ctx.cluster, ctx.cluster.writer_hold
    if cluster.kafka is None:
        injection.note("the job has no Kafka sink")
        return
    old = cluster.current
    hold.arm()
    try:
        deadline = time.monotonic() + HELD_WITHIN_S
        while (held := hold.held()) is None and time.monotonic() < deadline and old.alive():
            time.sleep(0.2)  # polling for the relaunch's writer to reach the hold
        if held is None:
            injection.note(f"no Kafka writer reached the hold within {HELD_WITHIN_S} s")
            return
        stalled = [ctx.pause(pid) for pid in [old.process.pid, *_stallable(old)]]
        injection.injected = True
        injection.note(
            f"{held} of {old.name} held before its writer started; the driver and executors stalled"
        )
        _take_over(ctx, injection, checkpoints=2)
        hold.release()
        deadline = time.monotonic() + HELD_WITHIN_S
        while (outcome := hold.outcome()) is None and time.monotonic() < deadline:
            time.sleep(0.2)  # polling for what the released writer did
        injection.note(f"the held writer, released: {outcome or 'no word'}")
        for process in stalled:
            ctx.resume(process)
    finally:
        hold.release()


def _rescale_in_place(ctx: FaultContext, injection: Injection, _rng: random.Random) -> None:
    """`lockgate rescale` of the running job, between 1 and 2 (the local cluster's
    slots), while the round's other faults hit it: a task or an executor lost during
    the stop checkpoint or the relaunch fails that launch, and the next one serves the
    request again (or finds itself at the target)."""
    _rescale(ctx, injection, None)


def _at_rescale_step(fault: Injector, target: processes.Target | None = None) -> Injector:
    """`fault` (one of the kinds of its own) injected at a step of an in-place rescale
    of the running job, the step drawn from the fault's seed (rescale_steps.py). A
    task worker or executor killed at `relaunched` is one of the relaunch's: the
    old stage's tasks may still be ending then, and a process picked from all of
    them would most likely be one of those."""

    def inject(ctx: FaultContext, injection: Injection, rng: random.Random) -> None:
        step = rng.choice(STEPS)

        def at_step(steps: RescaleSteps) -> None:
            if step == "relaunched" and target in ("worker", "executor"):
                assert target is not None
                _kill_in_relaunch(ctx, injection, steps, target, rng)
            else:
                fault(ctx, injection, rng)

        _rescale(ctx, injection, (step, at_step))

    return inject


def _kill_in_relaunch(
    ctx: FaultContext, injection: Injection, steps: RescaleSteps, target: processes.Target, rng: random.Random
) -> None:
    """SIGKILL a task worker of the relaunch (or its executor): the process listening
    on an exchange port one of the relaunch's tasks published, once one has."""
    relaunch = steps.relaunch
    assert relaunch is not None
    prefix = steps.keys.exchange_of(relaunch)
    deadline = time.monotonic() + TARGET_WAIT_S
    while time.monotonic() < deadline:
        found = ctx.cluster.ask(lambda etcd: etcd.get_prefix_at(prefix))
        addresses = sorted(value.decode() for _, value in found[0]) if found else []
        if addresses:
            address = rng.choice(addresses)
            worker = listening_on(int(address.rsplit(":", 1)[1]))
            pid = worker
            if worker is not None and target == "executor":
                pid = ancestor_in(worker, set(ctx.cluster.current.spark.executors()))
            if pid is not None:
                kill = functools.partial(processes.kill, pid)
                injection.injected = _between_kafka_transactions(ctx, injection, kill)
                injection.note(
                    f"SIGKILL {target} {pid}, of the relaunch's (launch {relaunch}) task at {address}"
                )
                return
        time.sleep(0.1)  # polling etcd and the process table for the relaunch's first task
    injection.note(f"no task of the relaunch (launch {relaunch}) found within {TARGET_WAIT_S:g} s")


def _rescale(
    ctx: FaultContext,
    injection: Injection,
    fault_at: tuple[RescaleStep, Callable[[RescaleSteps], None]] | None,
) -> None:
    """Request a rescale between 1 and 2; with `fault_at`, inject the fault once etcd
    shows its step; then wait for the final answer. Everything within
    `RESCALE_WAIT_S` of the request, which expires then."""
    status = ctx.cluster.status()
    if status is None or status.state != "running":
        injection.note("no running driver to ask")
        return
    target = 1 if status.parallelism > 1 else 2
    steps = ctx.cluster.ask(lambda etcd: request_watched(etcd, JOB, target, RESCALE_WAIT_S))
    if steps is None:
        injection.note("etcd did not take the rescale request")
        return
    deadline = steps.started + RESCALE_WAIT_S
    injection.injected = fault_at is None
    since, since_what = steps.started, "the request"
    if fault_at is not None:
        step, fault = fault_at
        _follow(ctx, steps, lambda s: s.reached(step) or s.over_before(step), deadline)
        if not steps.reached(step):
            injection.note(f"step {step} not reached")
        else:
            since, since_what = time.monotonic(), "the fault"
            injection.note(f"at step {step} ({since - steps.started:.2f} s after the request)")
            fault(steps)
    _follow(ctx, steps, lambda s: s.result is not None, deadline)
    result = steps.result
    said = (
        f"no final answer in {RESCALE_WAIT_S:.0f} s"
        if result is None
        else f"{result.status} at {result.parallelism} ({result.reason})"
    )
    injection.note(
        f"rescale {status.parallelism} -> {target}: {said}; "
        f"what etcd showed, from {since_what}: {steps.describe(since)}"
    )


def _follow(
    ctx: FaultContext, steps: RescaleSteps, until: Callable[[RescaleSteps], bool], deadline: float
) -> None:
    """Follow the rescale's steps in etcd until `until` holds or `deadline` passes; an
    etcd that does not answer (paused, restarting) is asked again."""
    while not until(steps) and (left := deadline - time.monotonic()) > 0:
        ctx.cluster.ask(lambda etcd: follow(etcd, steps, until), within_s=left)
        if not until(steps):
            time.sleep(0.2)  # etcd did not answer: polling it until it does


def _stallable(driver: Driver) -> list[int]:
    """A driver's processes but its Python task workers: what a frozen host stops,
    leaving a task that no longer needs its JVM running."""
    workers = set(driver.spark.python_workers())
    return [pid for pid in driver.spark.all() if pid not in workers]


def _stalled_launch_relaunched(ctx: FaultContext, injection: Injection, _rng: random.Random) -> None:
    """Every executor JVM stalls (a frozen host: Spark can no longer cancel their
    tasks, whose Python workers run on) while the coordinator fails a checkpoint
    (EIO renaming its `_metadata`): the job relaunches while the old launch's tasks
    still run. Once a checkpoint completed after the relaunch (which no task of the
    relaunch can have taken), the old tasks' workers are killed and the executors
    resume (issue 14, item 3)."""
    executors = _wait_for_targets(ctx, "executor")
    if not executors:
        injection.note("no executor to stall")
        return
    stalled = [ctx.pause(pid) for pid in executors]
    injection.injected = True
    storage, before = ctx.cluster.storage, ctx.cluster.status()
    storage.set(StorageFaults(rename="EIO", under=f"{ctx.cluster.work}/checkpoints"))
    deadline = time.monotonic() + injection.fault.hold_s
    relaunched_after: int | None = None  # the latest checkpoint when the relaunch was seen
    completed_by_old_tasks: int | None = None
    while time.monotonic() < deadline and completed_by_old_tasks is None:
        status, latest = ctx.cluster.status(), ctx.cluster.latest()
        latest_id = 0 if latest is None else latest.checkpoint_id
        if relaunched_after is None:
            if status is not None and before is not None and status.restarts > before.restarts:
                relaunched_after = latest_id
                storage.clear()
        elif latest_id > relaunched_after:
            completed_by_old_tasks = latest_id
        time.sleep(0.1)  # polling etcd for the restart and the next completion
    storage.clear()
    workers = ctx.cluster.current.spark.task_workers() if completed_by_old_tasks is not None else []
    for pid in workers:
        processes.kill(pid)  # the old launch's tasks end here, as a frozen host's do when it dies
    for process in stalled:
        ctx.resume(process)
    outcome = (
        "no relaunch while they stalled"
        if relaunched_after is None
        else f"relaunched after checkpoint {relaunched_after}; checkpoint {completed_by_old_tasks} "
        f"completed while only the old launch's tasks ran; their workers {workers} killed"
    )
    injection.note(f"executors {executors} stalled (at most {injection.fault.hold_s} s); {outcome}")


def _etcd_fault(action: str) -> Injector:
    def inject(ctx: FaultContext, injection: Injection, _rng: random.Random) -> None:
        etcd = ctx.cluster.etcd
        hold = injection.fault.hold_s
        if action == "kill":
            etcd.kill()
            injection.note(f"etcd SIGKILL, restarted after {hold} s")
        elif action == "pause":
            etcd.pause()
            injection.note(f"etcd SIGSTOP for {hold} s")
        else:
            etcd.restart()
            injection.note("etcd stopped (SIGTERM) and started")
        injection.injected = True
        time.sleep(hold)  # how long etcd stays down is the fault
        etcd.ensure_running()

    return inject


def _storage_fault(make: Callable[[float], StorageFaults]) -> Injector:
    def inject(ctx: FaultContext, injection: Injection, rng: random.Random) -> None:
        work = ctx.cluster.work
        faults = make(injection.fault.hold_s)
        # Slow uploads are the checkpoints' (a sink slowed per record is another fault).
        scopes = (
            [f"{work}/checkpoints"] if faults.slow_write_s else [None, f"{work}/checkpoints", f"{work}/out"]
        )
        scope = rng.choice(scopes)
        faults = StorageFaults(faults.write, faults.rename, faults.delete, faults.slow_write_s, scope)
        ctx.cluster.storage.set(faults)
        injection.injected = True
        switched = {k: v for k, v in faults.to_json().items() if v and k != "under"}
        injection.note(f"{switched} under {scope or work} for {injection.fault.hold_s} s")
        time.sleep(injection.fault.hold_s)  # how long storage misbehaves is the fault
        ctx.cluster.storage.clear()

    return inject


def _partition(ctx: FaultContext, injection: Injection, _rng: random.Random) -> None:
    """Silence the exchange between the tasks until the job restarts its tasks or
    another launch takes over (the runtime noticed), or the partition bound passes
    (it did not: a hang). The bound counts only time in which no other fault of the
    round is held: a paused driver or etcd cannot report a restart, and a takeover
    holds for up to `TAKEOVER_WAIT_S`."""
    before = ctx.cluster.status()
    deadline = time.monotonic() + TARGET_WAIT_S
    while (silenced := ctx.proxies.blackhole()) == 0 and time.monotonic() < deadline:
        time.sleep(0.2)  # polling for the connections of a launch still starting
    if silenced == 0:
        injection.note(f"no exchange connection to partition in {TARGET_WAIT_S} s")
        return
    injection.injected = True
    partitioned = ctx.cluster.current  # the driver whose launch's tasks hold the connections
    started = unhindered_since = time.monotonic()
    waited_out: set[str] = set()
    while time.monotonic() - unhindered_since < ctx.partition_bound_s:
        if not partitioned.alive():
            # Killed by another fault of the round: its launch, and the partitioned
            # connections, ended with it; its relaunch is the recovery the round checks.
            injection.note(f"{silenced} connection(s) blackholed; their driver {partitioned.name} ended")
            break
        status = ctx.cluster.status()
        before = before or status  # etcd may have been down when the partition began
        if before is not None and status is not None and _relaunched(before, status):
            injection.note(
                f"{silenced} connection(s) blackholed; {status.driver} relaunched the job "
                f"{time.monotonic() - started:.1f} s later"
            )
            break
        if others := ctx.others_holding(injection.fault.kind):
            unhindered_since = time.monotonic()
            waited_out |= others
        time.sleep(0.25)  # polling etcd for the restart
    else:
        injection.hang = f"a partition of the exchange went unnoticed for {ctx.partition_bound_s} s"
        injection.note(f"{silenced} connection(s) blackholed; no restart in {ctx.partition_bound_s} s")
    if waited_out:
        injection.note(f"the bound waited out {sorted(waited_out)}")
    ctx.proxies.heal()


def _relaunched(before: JobStatus, now: JobStatus) -> bool:
    return now.restarts > before.restarts or now.driver != before.driver


def _corrupt_latest(how: str) -> Injector:
    def inject(ctx: FaultContext, injection: Injection, rng: random.Random) -> None:
        latest = ctx.cluster.latest()
        if latest is None:
            injection.note("no completed checkpoint to corrupt")
            return
        corrupted = corrupt_snapshot(latest.path, how, rng)  # type: ignore[arg-type]
        workers = _wait_for_targets(ctx, "worker")
        if workers:
            processes.kill(rng.choice(workers))  # the restart that must read the corrupted checkpoint
        injection.injected = True
        injection.note(f"checkpoint {latest.checkpoint_id}: {corrupted.describe()}; a task worker killed")

    return inject


INJECTORS: dict[str, Injector] = {
    "worker-kill": _process_fault("worker", pause=False),
    "worker-pause": _process_fault("worker", pause=True),
    "executor-kill": _process_fault("executor", pause=False),
    "executor-pause": _process_fault("executor", pause=True),
    "executors-stall-relaunch": _stalled_launch_relaunched,
    "driver-kill": _process_fault("driver", pause=False),
    "driver-pause": _process_fault("driver", pause=True),
    "driver-pause-takeover": _driver_pause_takeover,
    "etcd-kill": _etcd_fault("kill"),
    "etcd-pause": _etcd_fault("pause"),
    "etcd-restart": _etcd_fault("restart"),
    "storage-eio-write": _storage_fault(lambda _: StorageFaults(write="EIO")),
    "storage-eio-rename": _storage_fault(lambda _: StorageFaults(rename="EIO")),
    "storage-eio-delete": _storage_fault(lambda _: StorageFaults(delete="EIO")),
    "storage-slow": _storage_fault(lambda _: StorageFaults(slow_write_s=0.3)),
    "storage-enospc": _storage_fault(lambda _: StorageFaults(write="ENOSPC")),
    "exchange-partition": _partition,
    "checkpoint-flip": _corrupt_latest("flip"),
    "checkpoint-truncate": _corrupt_latest("truncate"),
    "kafka-late-writer": _late_kafka_writer,
    "rescale-in-place": _rescale_in_place,
}
# The same faults, injected at a step of an in-place rescale.
AT_RESCALE_STEP: dict[str, tuple[str, processes.Target | None]] = {
    "rescale-driver-kill": ("driver-kill", None),
    "rescale-etcd-pause": ("etcd-pause", None),
    "rescale-task-kill": ("worker-kill", "worker"),
    "rescale-executor-kill": ("executor-kill", "executor"),
}
INJECTORS.update(
    {kind: _at_rescale_step(INJECTORS[fault], target) for kind, (fault, target) in AT_RESCALE_STEP.items()}
)


def run_fault(ctx: FaultContext, injection: Injection, round_start: float) -> None:
    """In its own thread: wait for the fault's time in the round, inject, hold, heal."""
    delay = round_start + injection.fault.at_s - time.monotonic()
    if delay > 0:
        time.sleep(delay)  # the schedule's moment for this fault
    injection.started = time.monotonic()
    with ctx.lock:
        ctx.holding.add(injection.fault.kind)
    try:
        INJECTORS[injection.fault.kind](ctx, injection, random.Random(injection.fault.seed))
    except Exception as error:  # noqa: BLE001 - a harness error is reported with the round
        injection.note(f"injector failed: {type(error).__name__}: {error}")
    finally:
        with ctx.lock:
            ctx.holding.discard(injection.fault.kind)
    injection.ended = time.monotonic()
