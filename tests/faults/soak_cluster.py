"""What the soak runs its job on: an external etcd, and the job's driver submitted to
Spark `local-cluster` as the operator's driver pods submit it. Like the operator,
the cluster relaunches a driver that exited (it resumes from the latest
checkpoint, waiting out a dead driver's lease); unlike the operator, it can start
a second driver while the first still lives (a takeover after a pause)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.job_status import read_status
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import CompletedCheckpoint, JobStatus, decode
from lockgate.runtime.snapshot.snapshot_key import new_key_text

from tests.faults import processes
from tests.faults.etcd_faults import EtcdFaults
from tests.faults.exchange_partition import exchange_environment
from tests.faults.faulty_fs import StorageFaultSwitch
from tests.faults.late_writer import WriterHold
from tests.kafka_broker import KafkaBroker, kafka_broker
from tests.runtime.recovery.lockgate_process import environment

T = TypeVar("T")
JOB = JobKeys("default", "soak")
ETCD_QUESTION_S = 3.0
_SUPERVISE_S = 0.2


@dataclass(frozen=True)
class JobOptions:
    parallelism: int = 2
    keys: int = 23
    partitions: int = 4
    checkpoint_interval_s: float = 1.0
    checkpoint_timeout_s: float = 120.0
    takeover_wait_s: float = 60.0
    restart_delay_s: float = 1.0
    master: str = "local-cluster[2,1,1024]"
    kafka: bool = False  # also a KafkaSink of the sums, into a broker of the soak's own
    # Exactly-once checkpoints go unaligned after this much alignment (0: always); None: aligned.
    aligned_checkpoint_timeout_s: float | None = None


@dataclass
class Driver:
    """One submitted driver: spark-submit's process (its JVM) and its log."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    started: float
    seen: set[processes.ProcessId] = field(default_factory=set)  # its Spark processes, while it ran
    exit_code: int | None = None

    @property
    def spark(self) -> processes.SparkProcesses:
        return processes.SparkProcesses(self.process.pid)

    def alive(self) -> bool:
        return self.process.poll() is None


class SoakCluster:
    def __init__(self, work: Path, options: JobOptions) -> None:
        self.work = work
        self.options = options
        self.input_url = f"file://{work}/input"
        self.output_url = f"faulty://{work}/out"
        self.checkpoint_url = f"faulty://{work}/checkpoints"
        (work / "input").mkdir(parents=True, exist_ok=True)
        self.storage = StorageFaultSwitch(work / "storage-faults.json")
        self.etcd_server = EtcdServer(work / "etcd")
        self.etcd = EtcdFaults(self.etcd_server)
        # Every driver signs and checks snapshots with the job's one key, as the operator
        # gives each driver pod the job's Secret: a replacement restores its predecessor's.
        self.snapshot_key = work / "snapshot.key"
        if not self.snapshot_key.exists():
            self.snapshot_key.write_text(new_key_text())
        self.writer_hold = WriterHold(work / "writer-hold")
        self.kafka: KafkaBroker | None = None
        self.kafka_topic = "sums"
        self._resources = contextlib.ExitStack()
        self.drivers: list[Driver] = []
        self.events: list[str] = []  # what happened to drivers, for the round's log
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        self.etcd_server.start()
        if self.options.kafka:
            (self.work / "logs").mkdir(exist_ok=True)
            self.kafka = self._resources.enter_context(kafka_broker(self.work / "logs" / "tansu.log"))
            self.kafka_topic = self.kafka.create_topic(2, "sums")
        self.launch_driver()
        self._supervisor = threading.Thread(target=self._supervise, name="soak-supervisor", daemon=True)
        self._supervisor.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=10)
        for driver in self.alive_drivers():
            for pid in driver.spark.all():
                processes.resume(pid)
            driver.process.terminate()
        for driver in self.drivers:
            try:
                driver.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                driver.process.kill()
                driver.process.wait()
        self.kill_orphans()
        self.etcd.ensure_running()
        self.etcd_server.stop()
        self._resources.close()

    def _command(self, name: str) -> list[str]:
        o = self.options
        command = [sys.executable, "-m", "lockgate.runtime.driver.submit", "--master", o.master, "--"]
        command += ["tests.faults.soak_job:running_sum", "--etcd", self.etcd_server.endpoint]
        command += ["--namespace", JOB.namespace, "--job-id", JOB.job, "-p", str(o.parallelism)]
        command += ["--checkpoint-interval", str(o.checkpoint_interval_s)]
        command += ["--checkpoint-timeout", str(o.checkpoint_timeout_s)]
        if o.aligned_checkpoint_timeout_s is not None:
            command += ["--aligned-checkpoint-timeout", f"{o.aligned_checkpoint_timeout_s}s"]
        command += [
            "--checkpoint-dir",
            self.checkpoint_url,
            "--savepoint-dir",
            f"file://{self.work}/savepoints",
        ]
        command += ["--work-dir", str(self.work / "drivers" / name), "--driver-name", name]
        command += ["--snapshot-key-file", str(self.snapshot_key)]
        command += ["--takeover-wait", str(o.takeover_wait_s)]
        command += ["--restart-strategy", "fixed-delay", "--restart-attempts", "1000"]
        command += ["--restart-delay", str(o.restart_delay_s)]
        # A corrupted latest checkpoint leaves an older one to restore: the soak takes the
        # duplicates it announces (each checked against what the damaged one committed).
        command += ["--accept-duplicate-output"]
        command += ["--arg", f"input={self.input_url}", "--arg", f"output={self.output_url}"]
        if self.kafka is not None:
            command += [
                "--arg",
                f"kafka={self.kafka.bootstrap_servers}",
                "--arg",
                f"topic={self.kafka_topic}",
            ]
            command += ["--arg", f"hold={self.writer_hold.directory}"]
        return command

    def kafka_committed(self) -> list[dict[str, Any]]:
        """What a read_committed consumer of the Kafka sink's topic sees (none without one)."""
        if self.kafka is None:
            return []
        return [json.loads(value) for _, _, _, value in self.kafka.read(self.kafka_topic)]

    def launch_driver(self) -> Driver:
        with self._lock:
            name = f"driver-{len(self.drivers)}"
            log = self.work / "logs" / f"{name}.log"
            log.parent.mkdir(exist_ok=True)
            env = {**environment(), **self.storage.environment(), **exchange_environment()}
            with log.open("wb") as out:
                process = subprocess.Popen(
                    self._command(name), cwd=self.work, env=env, stdout=out, stderr=subprocess.STDOUT
                )
            driver = Driver(name, process, log, time.monotonic())
            self.drivers.append(driver)
            self.events.append(f"{time.strftime('%H:%M:%S')} launched {name} (pid {process.pid})")
            return driver

    def _supervise(self) -> None:
        """Relaunch when no driver lives, as the operator does for a lost driver pod."""
        while not self._stopping.wait(_SUPERVISE_S):
            for driver in list(self.drivers):
                if driver.alive():
                    found = (processes.identify(pid) for pid in driver.spark.all())
                    driver.seen.update(p for p in found if p is not None)
                elif driver.exit_code is None:
                    driver.exit_code = driver.process.returncode
                    self.events.append(
                        f"{time.strftime('%H:%M:%S')} {driver.name} exited {driver.exit_code}: "
                        f"{last_failure(driver.log)}"
                    )
            if not any(d.alive() for d in self.drivers) and not self._stopping.is_set():
                self.launch_driver()

    @property
    def current(self) -> Driver:
        """The newest driver alive (a replacement may have given up to the one it
        was to replace), else the newest."""
        alive = self.alive_drivers()
        return alive[-1] if alive else self.drivers[-1]

    def alive_drivers(self) -> list[Driver]:
        return [d for d in self.drivers if d.alive()]

    def orphans(self) -> list[processes.ProcessId]:
        """Processes of exited drivers that still live (an executor JVM or a task
        worker left behind by its dead driver)."""
        return sorted(p for d in self.drivers if not d.alive() for p in d.seen if processes.alive(p))

    def kill_orphans(self) -> list[int]:
        found = self.orphans()
        for pid, _ in found:
            processes.kill(pid)
        return [pid for pid, _ in found]

    # -- what etcd says -------------------------------------------------------------

    def ask(self, question: Callable[[Etcd], Awaitable[T]], within_s: float = ETCD_QUESTION_S) -> T | None:
        """`question` answered by etcd, or None when it does not answer in time."""

        async def asking() -> T:
            async with Etcd(EtcdConfig.from_url(self.etcd_server.endpoint)) as etcd:
                return await question(etcd)

        try:
            return asyncio.run(asyncio.wait_for(asking(), within_s))
        except (TimeoutError, OSError, RuntimeError):
            return None
        except Exception:  # noqa: BLE001 - grpc's errors while etcd is down mean "no answer"
            return None

    def status(self) -> JobStatus | None:
        return self.ask(lambda etcd: read_status(etcd, JOB))

    def ever_marked_unusable(self) -> set[int] | None:
        """Every checkpoint the job ever marked unusable, those whose marks retention
        deleted since included: the puts in etcd's history (nothing here compacts it).
        A sentinel written beside the marks ends the replay: etcd delivers a watch's
        events in revision order, so once it arrives the history before it is in."""
        marks = JOB.unusable  # ".../checkpoints/unusable/"
        around = marks.rstrip(b"/")  # also covers the sentinel, which the runtime never reads
        sentinel = around + b"~soak-history-end"

        async def marked(etcd: Etcd) -> set[int]:
            token = uuid.uuid4().hex.encode()  # the history holds every earlier call's sentinel too
            await etcd.put(sentinel, token)
            ids: set[int] = set()
            async for event in etcd.watch_prefix(around, 1):
                if event.key == sentinel and event.value == token:
                    break
                if event.key.startswith(marks) and not event.deleted:
                    ids.add(int(event.key[len(marks) :]))
            await etcd.delete(sentinel)
            return ids

        return self.ask(marked)

    def latest(self) -> CompletedCheckpoint | None:
        async def latest(etcd: Etcd) -> CompletedCheckpoint | None:
            n = await etcd.get(JOB.latest)
            if n is None:
                return None
            summary = await etcd.get(JOB.completed_of(int(n)))
            return None if summary is None else decode(CompletedCheckpoint, summary)

        return self.ask(latest)


def last_failure(log: Path) -> str:
    """The driver's last word on why it ended, from its log."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    for line in reversed(lines):
        if "lockgate driver:" in line or "job failed" in line or "Error" in line:
            return line.strip()[:400]
    return lines[-1].strip()[:400] if lines else "(empty log)"
