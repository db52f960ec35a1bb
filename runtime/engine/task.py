"""One task: subtask `index` of every vertex, a thread per chain.

A chain starts at a source or after a keyed exchange and takes in every vertex
reachable by forward edges. Chains form a DAG, so a chain blocked on a full
channel never waits on itself: bounded channels cannot deadlock.
"""

from __future__ import annotations

import logging
import posixpath
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from lockgate.runtime.api.connectors import Backlog, Committer, JobIdentity, SourceReader, SubtaskContext
from lockgate.runtime.api.graph import KEYED_KINDS, JobGraph, Vertex
from lockgate.runtime.autoscaling.series import SubtaskLoad
from lockgate.runtime.coordination.records import CompletedCheckpoint, Trigger
from lockgate.runtime.coordination.restore_point import RestorePoint
from lockgate.runtime.engine.alignment import ChannelState, InputGate, Mode
from lockgate.runtime.engine.chain_time import ChainTime
from lockgate.runtime.engine.channel_state import Groups, KeyGroupOf, group_frames, write_channel_state
from lockgate.runtime.engine.channels import InputChannel, OutputChannel, TaskCancelledError
from lockgate.runtime.engine.control import CheckpointControl, TaskProgress
from lockgate.runtime.engine.events import MAX_WATERMARK, Barrier, Idle, TimestampedBatch, Watermark
from lockgate.runtime.engine.frame_sizing import DEFAULT_IN_FLIGHT_TARGET_S
from lockgate.runtime.engine.operator_factories import ChainContext, make_operator, takes_keyed_records
from lockgate.runtime.engine.operators import (
    Counted,
    FanOut,
    KeyedExchange,
    KeyGroupCounted,
    Output,
    SinkOperator,
)
from lockgate.runtime.engine.source_watermarks import SourceWatermarks, source_watermarks
from lockgate.runtime.engine.vertex_state import (
    CommittingVertexState,
    SourceVertexState,
    StateConfig,
    TaskVertexState,
    vertex_state,
)
from lockgate.runtime.engine.window_operator import LateRecords
from lockgate.runtime.keygroups import key_group_range
from lockgate.runtime.snapshot.checkpointable import CheckpointableKeyedStateBackend
from lockgate.runtime.snapshot.metadata import SubtaskState
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.snapshot.subtask import PendingSubtaskSnapshot

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.005
PROGRESS_INTERVAL_S = 1.0
# A source's backlog is as old as this at most when its load counters are published:
# the autoscaler measures its growth between two of them, over a window of seconds.
BACKLOG_INTERVAL_S = 0.25
FAILED_CHANNELS_LINGER_S = 2.0  # how long a failed task's channels stay open (Task.run)

KEY_GROUP_LOAD_LIMIT = 1024
"""A keyed subtask owning at most this many key groups counts its records per key
group and publishes the counts with its load (a second's progress record per
subtask stays a few kilobytes); one owning more publishes none, and the
autoscaler sizes its chain as if its keys were spread evenly."""


@dataclass(frozen=True)
class TaskConfig:
    index: int
    parallelism: int
    state: StateConfig
    mode: Mode = "exactly-once"
    bounded: bool = False
    batch_size: int = 512  # records per frame of a keyed exchange, at most
    # What a record may wait in a backpressured keyed channel (frame_sizing); None: frames stay full.
    in_flight_target_s: float | None = DEFAULT_IN_FLIGHT_TARGET_S
    # Exactly-once: how long a keyed vertex aligns a checkpoint's barriers before it takes
    # the checkpoint unaligned (0: at once); None: always aligned, barriers never overtake.
    unaligned_after_s: float | None = None

    @property
    def overtaking(self) -> bool:
        """Whether barriers overtake what the channels hold (unaligned checkpoints may happen)."""
        return self.mode == "exactly-once" and self.unaligned_after_s is not None


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


AlignmentListener = Callable[[str, float, bool], None]
"""Told (vertex, seconds, unaligned) each time a keyed vertex passed a checkpoint's
barrier on: how long it aligned, and whether it then took the checkpoint unaligned."""


@dataclass
class Wiring:
    """Channels of the keyed exchanges: per keyed vertex, one per upstream or
    downstream subtask. `connect` opens them before the task runs; `closers`
    release them after."""

    inputs: dict[str, list[InputChannel]]
    outputs: dict[str, list[OutputChannel]]
    wakeups: dict[str, threading.Event]
    connect: Callable[[], None] = lambda: None
    closers: list[Callable[[], None]] = field(default_factory=list)

    @classmethod
    def empty(cls, graph: JobGraph) -> Wiring:
        """No channels yet: an empty list and a wakeup for each keyed vertex of `graph`."""
        keyed = [v.name for v in graph.vertices if v.keyed]
        return cls({v: [] for v in keyed}, {v: [] for v in keyed}, {v: threading.Event() for v in keyed})


class Task:
    def __init__(
        self,
        graph: JobGraph,
        config: TaskConfig,
        control: CheckpointControl,
        *,
        wiring: Wiring,
        restore: RestorePoint | None = None,
        cancelled: threading.Event | None = None,
        rendezvous: Callable[[str], None] | None = None,
    ) -> None:
        self.graph = graph
        # Where the launch's tasks wait for each other at a point of their start;
        # None: one process built them all before running any (nothing to wait for).
        self._rendezvous = rendezvous
        # Set when any chain of the job fails: every chain then stops.
        self.cancelled = cancelled or threading.Event()
        self.config = config
        self.control = control
        self.wiring = wiring
        self._uploads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="snapshot")
        # Per (vertex, checkpoint) taken unaligned, its channel state once every barrier is in.
        self._channel_states: dict[tuple[str, int], Future[Groups]] = {}
        self._channel_states_lock = threading.Lock()
        self.states: dict[str, TaskVertexState] = {
            v.name: vertex_state(v, config.index, config.parallelism, config.state) for v in graph.vertices
        }
        if restore is not None:
            for state in self.states.values():
                state.restore(restore)
        self._sinks: dict[str, SinkOperator] = {}
        # Per vertex that commits what it writes outside the job: sinks' writers, and
        # source readers that write on the side.
        self.committers: dict[str, Committer] = {}
        # Per vertex, for metrics: records into it, records out of it, bytes of its last snapshot.
        self.records_in: dict[str, Counted] = {}
        self.records_out: dict[str, Counted] = {}
        self.state_bytes: dict[str, int] = {}
        self.alignment_listener: AlignmentListener = lambda vertex, seconds, unaligned: None
        # Per window vertex, the records it dropped as late.
        self.late_records_dropped: dict[str, LateRecords] = {}
        self._chain_context = ChainContext(
            config.index, config.parallelism, self.snapshot, self._keyed_backend, self._late_records
        )
        self.chains = [self._chain(chain) for chain in graph.chains()]

    def _chain(self, chain: list[Vertex]) -> ChainRunner:
        head = chain[0]
        if head.kind != "source":
            return ChainRunner(self, chain, self._output_of(head))
        output = self.records_out[head.name] = Counted(self._downstream(head))
        return ChainRunner(self, chain, output)

    def _downstream(self, vertex: Vertex) -> Output:
        outputs: list[Output] = []
        for after in self.graph.downstream(vertex.name):
            if after.keyed:
                assert after.input is not None
                assert after.input.key_fn is not None
                config, channels = self.config, self.wiring.outputs[after.name]
                exchange = KeyedExchange(
                    after.input.key_fn,
                    channels,
                    config.state.max_parallelism,
                    config.batch_size,
                    config.in_flight_target_s,
                    keyed_records=takes_keyed_records(after.kind),
                    overtaking=config.overtaking,
                )
                outputs.append(exchange)
            else:
                outputs.append(self._output_of(after))
        return outputs[0] if len(outputs) == 1 else FanOut(outputs)

    def _output_of(self, vertex: Vertex) -> Output:
        """The operator for `vertex`, wired to everything after it, its records counted."""
        operator = self._operator(vertex)
        counted = Counted(operator)
        if vertex.keyed and takes_keyed_records(vertex.kind):
            config = self.config
            owned = key_group_range(config.state.max_parallelism, config.parallelism, config.index)
            if len(owned) <= KEY_GROUP_LOAD_LIMIT:
                counted = KeyGroupCounted(operator, owned)
        self.records_in[vertex.name] = counted
        return counted

    def _operator(self, vertex: Vertex) -> Output:
        if vertex.kind == "sink":
            writer = vertex.operator.create_writer(self.subtask_context(vertex.name))
            self.committers[vertex.name] = writer
            sink = SinkOperator(vertex.name, writer, self.snapshot)
            self._sinks[vertex.name] = sink
            return sink
        out = self.records_out[vertex.name] = Counted(self._downstream(vertex))
        return make_operator(vertex, out, self._chain_context)

    def _late_records(self, vertex: str) -> LateRecords:
        return self.late_records_dropped.setdefault(vertex, LateRecords())

    def _keyed_backend(self, vertex: str) -> CheckpointableKeyedStateBackend | None:
        return self.states[vertex].keyed

    def committing(self, vertex: str) -> CommittingVertexState:
        """The state of a vertex that commits what it writes outside the job."""
        state = self.states[vertex]
        assert isinstance(state, CommittingVertexState), f"{vertex} commits nothing"
        return state

    def subtask_context(self, vertex: str) -> SubtaskContext:
        keys = self.control.keys
        job = JobIdentity(keys.namespace, keys.job)
        config = self.config
        exactly_once = config.mode == "exactly-once"
        launch = self.control.launch
        meet = self._rendezvous
        return SubtaskContext(
            job,
            config.index,
            config.parallelism,
            launch,
            vertex,
            exactly_once,
            self.control.confirm_launch,
            **({} if meet is None else {"rendezvous": lambda point: meet(f"{vertex}/{point}")}),
        )

    # -- checkpoints -----------------------------------------------------------------

    def snapshot(self, vertex: str, barrier: Barrier, drained: bool = False) -> None:
        """Synchronous part on the chain's thread; upload and acknowledgement off it."""
        trigger = barrier.trigger
        if (committer := self.committers.get(vertex)) is not None:
            n = trigger.checkpoint_id
            self.committing(vertex).record_committables(n, committer.pre_commit(n))
        records = sink.take_epoch() if (sink := self._sinks.get(vertex)) is not None else 0
        pending = self.states[vertex].snapshot(trigger)
        with self._channel_states_lock:
            channel = self._channel_states.get((vertex, trigger.checkpoint_id))
        self._uploads.submit(self._upload, vertex, trigger, pending, drained, records, channel=channel)

    def expect_channel_state(self, vertex: str, checkpoint_id: int) -> None:
        """`vertex` takes checkpoint `checkpoint_id` unaligned: its snapshot waits for
        the channel state (`channel_state_gathered`)."""
        with self._channel_states_lock:
            self._channel_states[(vertex, checkpoint_id)] = Future()

    def channel_state_gathered(self, vertex: str, state: ChannelState) -> None:
        key = (vertex, state.checkpoint_id)
        with self._channel_states_lock:
            awaited = self._channel_states.pop(key)
        try:
            awaited.set_result(group_frames(state.frames, self._key_group_of(vertex)))
        except Exception as error:  # noqa: BLE001 - the snapshot fails with it, not the chain
            awaited.set_exception(error)

    def _abandon_channel_states(self) -> None:
        """The task ends: snapshots still waiting for their channel state fail, not hang."""
        with self._channel_states_lock:
            for awaited in self._channel_states.values():
                awaited.set_exception(TaskCancelledError("the task ended before its channel state was in"))
            self._channel_states.clear()

    def _key_group_of(self, vertex: str) -> KeyGroupOf:
        """How the exchange into keyed operator `vertex` placed a record it sent: only
        a keyed operator takes checkpoints unaligned, and its input is `KeyedRecord`s."""
        assert takes_keyed_records(self.graph.vertex(vertex).kind), f"{vertex} takes no keyed records"
        return lambda record: int(record[2])

    def _upload(
        self,
        vertex: str,
        trigger: Trigger,
        pending: PendingSubtaskSnapshot,
        drained: bool,
        records: int,
        *,
        channel: Future[Groups] | None,
    ) -> None:
        try:
            state = pending.complete()
            if channel is not None:
                state = self._with_channel_state(vertex, trigger, state, channel.result())
        except Exception as error:
            log.exception("snapshot of %s/%s failed", vertex, self.config.index)
            self.control.decline(vertex, trigger, f"{type(error).__name__}: {error}")
            return
        self.state_bytes[vertex] = state.size_bytes()
        self.control.acknowledge(vertex, trigger, state, drained, records)

    def _with_channel_state(
        self, vertex: str, trigger: Trigger, state: SubtaskState, groups: Groups
    ) -> SubtaskState:
        storage = CheckpointStorage(trigger.target)
        path = posixpath.join(storage.root, vertex, str(self.config.index), "channel")
        return replace(state, channel=write_channel_state(storage, path, storage.root, groups))

    def backpressured_s(self) -> dict[str, float]:
        """Per vertex feeding a keyed exchange: seconds its sends waited for room downstream."""
        blocked: dict[str, float] = {}
        for keyed, channels in self.wiring.outputs.items():
            edge = self.graph.vertex(keyed).input
            assert edge is not None
            blocked[edge.upstream] = blocked.get(edge.upstream, 0.0) + sum(c.blocked_s for c in channels)
        return blocked

    def busy_s(self) -> dict[str, float]:
        """Per chain, named by its first vertex: seconds its thread worked, not
        waiting for input nor for room downstream (chain_time.py)."""
        blocked = self.backpressured_s()
        return {
            chain.head.name: chain.time.busy_s(sum(blocked.get(v, 0.0) for v in chain.vertices))
            for chain in self.chains
        }

    def on_completed(self, chain: ChainRunner, completed: CompletedCheckpoint) -> None:
        for vertex in chain.vertices:
            if (committer := self.committers.get(vertex)) is not None:
                committer.commit(self.committing(vertex).take_committable(completed.checkpoint_id))
        if completed.kind == "checkpoint":
            for vertex in chain.vertices:
                if (keyed := self._keyed_backend(vertex)) is not None:
                    keyed.notify_checkpoint_complete(completed.checkpoint_id)

    # -- running ---------------------------------------------------------------------

    def progress(self) -> TaskProgress:
        read = sum(c.records_read for c in self.chains)
        written = sum(sink.written for sink in self._sinks.values())
        return TaskProgress(read, written, time.time_ns() // 1_000_000, self.load())

    def load(self) -> tuple[SubtaskLoad, ...]:
        """Per chain (named by its first vertex): records into it (a source: read),
        busy and backpressured seconds, and a source's backlog in records (None
        when it cannot tell it in records)."""
        blocked = self.backpressured_s()
        busy = self.busy_s()
        index = self.config.index
        loads = []
        for chain in self.chains:
            counted = None if chain.source else self.records_in[chain.head.name]
            by_key_group = counted if isinstance(counted, KeyGroupCounted) else None
            loads.append(
                SubtaskLoad(
                    chain.head.name,
                    index,
                    chain.records_read if counted is None else counted.count,
                    busy[chain.head.name],
                    sum(blocked.get(v, 0.0) for v in chain.vertices),
                    chain.source,
                    None if chain.backlog is None else chain.backlog.records,
                    chain.partitions,
                    None if by_key_group is None else by_key_group.first,
                    None if by_key_group is None else tuple(by_key_group.key_group_records),
                )
            )
        return tuple(loads)

    def _report_progress(self, done: threading.Event) -> None:
        """Publishes progress every second, and once more at the end."""
        while True:
            finished = done.wait(PROGRESS_INTERVAL_S)
            try:
                self.control.report_progress(self.progress())
            except Exception:
                log.warning("could not report progress of task %s", self.config.index, exc_info=True)
            if finished:
                return

    def run(self) -> None:
        """Run every chain to its end; re-raises the first chain failure."""
        done = threading.Event()
        reporter = threading.Thread(target=self._report_progress, args=(done,), daemon=True, name="progress")
        try:
            # Every sink writer of the launch exists before any recovers (a writer's
            # recovery may wait for its peers': SubtaskContext.rendezvous).
            try:
                for name, sink in self._sinks.items():
                    sink.writer.recover(self.committing(name).restored_committables())
            except BaseException:
                self.cancelled.set()  # the launch cannot run: its peers stop too
                raise
            self.wiring.connect()
            threads = [threading.Thread(target=c.run_guarded, name=c.name) for c in self.chains]
            for thread in threads:
                thread.start()
            reporter.start()
            for thread in threads:
                thread.join()
        finally:
            done.set()
            if reporter.is_alive():
                reporter.join()
            self._abandon_channel_states()
            for sink in self._sinks.values():
                try:
                    sink.writer.close()  # an open transaction stays hidden, never committed
                except Exception:
                    log.exception("closing sink %s/%s failed", sink.name, self.config.index)
            self._uploads.shutdown(wait=True)
            for state in self.states.values():
                state.close()
            if any(c.failure is not None for c in self.chains):
                # A peer learns of this failure as its channels from here closing, and
                # fails in turn; on Spark the first failure to arrive is the one
                # reported. Closed a moment later, they let this task's cause arrive first.
                lingering = threading.Timer(FAILED_CHANNELS_LINGER_S, self._close_wiring)
                lingering.daemon = True
                lingering.start()
            else:
                self._close_wiring()
        failures = [c.failure for c in self.chains if c.failure is not None]
        if failures:
            raise failures[0]

    def _close_wiring(self) -> None:
        for close in self.wiring.closers:
            close()


class ChainRunner:
    """The loop of one chain: read its source or input gate, push, handle barriers."""

    def __init__(self, task: Task, chain: list[Vertex], output: Output) -> None:
        self.task = task
        self.head = head = chain[0]
        self.output = output
        self.name = f"{head.name}-{task.config.index}"
        self.vertices = [v.name for v in chain]
        self.failure: BaseException | None = None
        self.records_read = 0
        self.backlog: Backlog | None = None  # a source's, refreshed every BACKLOG_INTERVAL_S
        self.partitions: int | None = None  # a source's partitions read (None: not partitioned), as often
        self.time = ChainTime()
        self.source = head.kind == "source"
        self._completions = task.control.subscribe_completions()
        self._triggers = task.control.subscribe_triggers() if head.kind == "source" else None

    def run_guarded(self) -> None:
        try:
            self.time.start()
            if self.head.kind == "source":
                self._run_source()
            else:
                self._run_gate()
        except TaskCancelledError:
            log.info("chain %s cancelled", self.name)
        except BaseException as error:  # handed to Task.run, which re-raises it
            # The driver shows the failure (the job's own traceback when the job's code
            # raised it), once: one line here at INFO (`-v`), the whole traceback at DEBUG.
            log.info("chain %s failed: %s: %s", self.name, type(error).__name__, error)
            log.debug("chain %s failed", self.name, exc_info=True)
            self.failure = error
            self.task.cancelled.set()
        finally:
            self.time.stop()

    def _check_cancelled(self) -> None:
        if self.task.cancelled.is_set():
            raise TaskCancelledError
        self.task.control.check_launch()

    def _commit_completed(self) -> bool:
        """Commit what completed checkpoints cover; True if one of them was final."""
        final = False
        while True:
            try:
                completed = self._completions.get_nowait()
            except queue.Empty:
                return final
            self.task.on_completed(self, completed)
            final = final or completed.final

    def _uncommitted(self) -> bool:
        committers = self.task.committers
        return any(self.task.committing(v).has_uncommitted for v in self.vertices if v in committers)

    def _next_trigger(self, wait: bool) -> Trigger | None:
        """The next checkpoint trigger; `wait`: the source has nothing to read, so
        it waits for one a little (idle time)."""
        assert self._triggers is not None
        if not wait:
            try:
                return self._triggers.get_nowait()
            except queue.Empty:
                return None
        started = self.time.now()
        try:
            return self._triggers.get(timeout=IDLE_WAIT_S)
        except queue.Empty:
            return None
        finally:
            self.time.waited_since(started)

    def _run_source(self) -> None:
        """Read, emit, and inject barriers. A bounded source that reached the end of
        its input is drained: it reads no more and says so in its acknowledgements;
        the first checkpoint at which every source was drained is the job's final
        one, and its completion ends the sources."""
        state = self.task.states[self.head.name]
        assert isinstance(state, SourceVertexState), f"{self.head.name} is no source"
        context = self.task.subtask_context(self.head.name)
        reader = self.head.operator.open_reader(context, state.restored_offsets())
        reader.recover(state.restored_committables())
        self.task.committers[self.head.name] = reader
        strategy = self.head.watermarks
        watermarks = (
            None if strategy is None else source_watermarks(self.head.name, strategy, reader, _monotonic_ms)
        )
        drained = ended = False
        backlog_due = 0.0
        while not ended or self._uncommitted():
            self._check_cancelled()
            if time.monotonic() >= backlog_due:
                self.backlog = reader.backlog()
                names = reader.partitions()
                self.partitions = None if names == [""] else len(names)
                backlog_due = time.monotonic() + BACKLOG_INTERVAL_S
            if self._commit_completed() and not ended:
                self._end_source(reader)
                ended = True
                continue
            records = [] if ended or drained else self._read(reader, watermarks)
            if records:
                self.records_read += len(records)
            elif not ended and not drained:
                self.output.flush()
                if (self.task.config.bounded or self.head.operator.bounded) and reader.reached_end():
                    if held_back := reader.end_of_input():
                        self.records_read += len(held_back)
                        stamps = None if watermarks is None else watermarks.timestamps("", held_back)
                        self.output.push(held_back, stamps)
                    # The end of bounded input is the end of event time: every event-time
                    # timer and window fires now, before the final checkpoint's barrier.
                    self.output.event_time(Watermark(MAX_WATERMARK))
                    self.output.flush()
                    drained = True
                    self.task.control.report_drained(self.head.name)
            # Between batches, triggers are checked without waiting: a busy source
            # must not starve checkpoints.
            trigger = self._next_trigger(wait=not records)
            if trigger is None or ended:
                continue
            state.record_offsets(reader.offsets())
            barrier = Barrier(trigger, drained)
            self.task.snapshot(self.head.name, barrier, drained=drained)
            self.output.barrier(barrier)
            if trigger.stop:
                self._end_source(reader)
                ended = True

    def _read(self, reader: SourceReader, watermarks: SourceWatermarks | None) -> list[Any]:
        """Poll a batch and push it on, with event time and a risen watermark if the
        source has a watermark strategy; returns what was read."""
        size = self.task.config.batch_size
        if watermarks is None:
            records = reader.poll(size)
            if records:
                self.output.push(records)
            return records
        records, stamps = [], []
        for partition, batch in reader.poll_partitions(size):
            records.extend(batch)
            stamps.extend(watermarks.timestamps(partition, batch))
        if records:
            self.output.push(records, stamps)
        for mark in watermarks.next_marks(reader.partitions()):
            self.output.event_time(mark)
        return records

    def _end_source(self, reader: SourceReader) -> None:
        self.output.end()
        reader.close()

    def _run_gate(self) -> None:
        config = self.task.config
        # Only a keyed operator's snapshot carries channel state and only its restore
        # replays it: a map, filter or sink right after a key_by always aligns.
        keyed = self.head.kind in KEYED_KINDS
        gate = InputGate(
            self.task.wiring.inputs[self.head.name],
            config.mode,
            unaligned_after_s=config.unaligned_after_s if keyed else None,
            replay=self.task.states[self.head.name].replay(config.batch_size),
        )
        wakeup = self.task.wiring.wakeups[self.head.name]
        ended = False
        while not ended or self._uncommitted():
            self._check_cancelled()
            self._commit_completed()
            item = gate.poll() if not ended else None
            if isinstance(item, list):
                self.output.push(item)
            elif isinstance(item, TimestampedBatch):
                self.output.push(item.records, item.timestamps)
            elif isinstance(item, (Watermark, Idle)):
                self.output.event_time(item)
            elif isinstance(item, Barrier):
                unaligned = gate.gathering(item.checkpoint_id)
                self.task.alignment_listener(self.head.name, gate.last_alignment_s, unaligned)
                if unaligned:
                    self.task.expect_channel_state(self.head.name, item.checkpoint_id)
                self.output.barrier(item)
            elif isinstance(item, ChannelState):
                self.task.channel_state_gathered(self.head.name, item)
            elif not ended and gate.finished:
                self.output.end()
                ended = True
            else:
                self.output.flush()
                started = self.time.now()
                wakeup.wait(IDLE_WAIT_S)
                self.time.waited_since(started)
                wakeup.clear()
