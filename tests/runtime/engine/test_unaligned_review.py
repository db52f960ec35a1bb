"""Adversarial review of unaligned exactly-once checkpoints (issue 40): each test here
shows a way the feature breaks exactly-once, hangs or degrades, on the in-process
engine (real Task code, real TCP channels)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import re
import struct
import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime import read_committed
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.job_requests import await_rescale, request_rescale
from lockgate.runtime.coordination.records import Trigger
from lockgate.runtime.coordination.restore_point import RestorePoint
from lockgate.runtime.engine.channels import ChannelClosedError
from lockgate.runtime.engine.events import Barrier, OvertakingBarrier
from lockgate.runtime.engine.frame_seal import MAC_BYTES
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.engine.job_master import JobMaster
from lockgate.runtime.engine.network import OVERTAKING, ExchangeServer
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.vertex_state import vertex_state
from lockgate.runtime.snapshot.handles import ChannelStateHandle
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, SubtaskState, VertexState, read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage, FileRef

from tests.exactness import assert_running_sums_exact
from tests.jobs.counting import InFlight
from tests.polling import eventually
from tests.runtime.cli.refusals import ARGS, WORD_COUNT, refusal
from tests.runtime.engine.test_exchange_security import CHANNEL, QUIET, _poll, _through_a_proxy
from tests.runtime.engine.test_in_process import _spec
from tests.runtime.engine.test_network import Exploit, _connected, _poll_until

KEYS = 23


def _assert_each_once(output: list[dict[str, Any]], count: int) -> None:
    times = Counter(r["n"] for r in output)
    lost = sorted(set(range(count)) - set(times))
    twice = sorted(n for n, k in times.items() if k > 1)
    assert (lost[:10], len(lost), twice[:10]) == ([], 0, []), f"lost {len(lost)}, twice {len(twice)}"


def _channel_records(tmp_path: Path, checkpoint_id: int, vertex: str) -> int | None:
    """Records in the channel state of `vertex` in checkpoint `checkpoint_id` (None: no vertex state)."""
    path = f"file://{tmp_path}/checkpoints/in-process/chk-{checkpoint_id}"
    state = read_metadata(CheckpointStorage(path), CheckpointStorage(path).root).vertices.get(vertex)
    if state is None:
        return None
    return sum(s.channel.records for s in state.subtasks if s.channel is not None)


@pytest.mark.parametrize("entrypoint", ["slow_keyed_map", "slow_keyed_sink"])
async def test_review_a_stateless_vertex_after_a_key_by_loses_its_channel_state_on_an_unaligned_rescale(
    tmp_path: Path, entrypoint: str
) -> None:
    """key_by -> map -> sink and key_by -> sink: the head of the chain after the keyed
    exchange is no keyed operator, yet its gate takes checkpoints unaligned. Its
    channel state is never written (map: the map takes no snapshot) or never replayed
    (sink: only KeyedVertexState replays), while the stopping launch drops it."""
    count = 4_000
    store = InMemoryStore()
    out = f"file://{tmp_path}/out"
    tracker = f"review-{entrypoint}-{tmp_path.name}"
    InFlight(tracker)
    args = {"count": str(count), "keys": str(KEYS), "slow_ms": "2", "output": out, "tracker": tracker}
    spec = _spec(tmp_path, f"tests.jobs.unaligned_review:{entrypoint}", store, args)
    spec = replace(spec, unaligned_after_s=0.0, in_flight_target_s=None, batch_size=32, channel_capacity=8)
    config = CheckpointConfig(interval_s=0.2, timeout_s=30, retained=100)
    master = JobMaster(spec, ThreadStage(), CheckpointStorage(f"file://{tmp_path}/checkpoints"), config)
    run = asyncio.create_task(master.run(restart_strategy("none")))

    def committed() -> int:
        try:
            return len(read_committed(out))
        except FileNotFoundError:
            return 0

    await eventually(lambda: committed() > 0, "output committed", timeout_s=60)
    request = await request_rescale(store, spec.keys, 3, expires_in_s=60)
    answer = await await_rescale(store, spec.keys, request, 60)
    assert (answer.status, answer.parallelism) == ("rescaled", 3), answer
    result = await asyncio.wait_for(run, 120)
    assert result.restarts == 0
    _assert_each_once(read_committed(out), count)


class _Aborts:
    """The ids of the checkpoints that aborted, as the job master's listener hears of them."""

    def __init__(self) -> None:
        self.ids: list[int] = []

    def completed(self, checkpoint: Any) -> None:
        pass

    def aborted(self, trigger: Any, reason: str) -> None:
        self.ids.append(trigger.checkpoint_id)

    def restarted(self) -> None:
        pass


async def test_review_an_aborted_checkpoint_leaves_no_files_behind_in_checkpoint_storage(
    tmp_path: Path,
) -> None:
    """A checkpoint that times out while a subtask still gathers its channel state:
    the coordinator deletes its directory, then the subtask's upload (which waited
    for the channel state) writes its state and channel files there anyway."""
    store = InMemoryStore()
    out = f"file://{tmp_path}/out"
    args = {"count": "2600", "keys": str(KEYS), "slow_ms": "4", "output": out}
    spec = _spec(tmp_path, "tests.jobs.configurable:slow_running_sum", store, args)
    spec = replace(spec, unaligned_after_s=0.0, in_flight_target_s=None, batch_size=64, channel_capacity=8)
    listener = _Aborts()
    config = CheckpointConfig(interval_s=0.1, timeout_s=0.3, tolerable_failures=1000, retained=100)
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    master = JobMaster(spec, ThreadStage(), storage, config, listener=listener)
    await asyncio.wait_for(master.run(restart_strategy("none")), 120)
    assert listener.ids, "no checkpoint aborted: nothing shown"
    root = tmp_path / "checkpoints" / "in-process"
    left = sorted(n for n in listener.ids if (root / f"chk-{n}").exists())
    assert not left, f"aborted checkpoints whose files were written after the abort: {left}"


@pytest.mark.parametrize("aligned_timeout_s", [0.0, 0.15])
async def test_review_two_keyed_exchanges_several_checkpoints_in_flight_a_failure_output_exact(
    tmp_path: Path, aligned_timeout_s: float, caplog: pytest.LogCaptureFixture
) -> None:
    """source -> key_by -> slow sum -> key_by -> counting pass-through -> sink, up to
    three checkpoints in flight (with a timeout: some taken aligned, some unaligned),
    one failure mid-stream and a restore with channel state at both keyed operators
    (always unaligned: the restart replays records that were in flight)."""
    caplog.set_level(logging.INFO, logger="lockgate.runtime.engine.job_master")
    count = 4_000
    store = InMemoryStore()
    out = f"file://{tmp_path}/out"
    args = {
        "count": str(count),
        "keys": str(KEYS),
        "slow_ms": "1",
        "output": out,
        "fail_at": str(count // 2),
        "flag": str(tmp_path / "failed-once"),
        "checkpoints": "2",
    }
    spec = _spec(tmp_path, "tests.jobs.unaligned_review:failing_two_exchanges", store, args)
    spec = replace(
        spec, unaligned_after_s=aligned_timeout_s, in_flight_target_s=None, batch_size=32, channel_capacity=8
    )
    config = CheckpointConfig(interval_s=0.1, timeout_s=30, max_concurrent=3, retained=100)
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    master = JobMaster(spec, ThreadStage(), storage, config)
    result = await asyncio.wait_for(master.run(restart_strategy("fixed-delay", attempts=2, delay_s=0)), 180)
    assert result.restarts == 1
    restored = [m for m in caplog.messages if m.startswith("launch 2 at parallelism 2 restores checkpoint ")]
    assert len(restored) == 1, caplog.messages
    if aligned_timeout_s == 0.0:  # every checkpoint unaligned behind a full channel
        assert re.search(
            r", replaying [1-9]\d* records in flight \(unaligned\) before new input$", restored[0]
        )
    output = read_committed(out)
    _assert_each_once(output, count)
    assert_running_sums_exact(output, count, KEYS)
    through: dict[int, int] = {}
    for record in output:
        through[record["through_key"]] = max(through.get(record["through_key"], 0), record["through"])
    assert through == Counter(n % 7 for n in range(count)), "the second keyed operator's counts"


def test_review_an_overtaking_frame_injected_on_the_path_fails_the_channel_unread(tmp_path: Path) -> None:
    """A frame with the OVERTAKING bit set by an on-path attacker without the MAC key:
    refused before its payload (a barrier and a carried frame, pickled) is unpickled."""

    server = ExchangeServer(b"s" * 32, liveness=QUIET, handshake_deadline_s=1.0)
    try:
        wakeup = threading.Event()
        inbound = server.expect(CHANNEL, 4, wakeup)
        with _through_a_proxy(server) as (proxy, outbound):
            outbound.send([("k", 1)])
            assert _poll(inbound, wakeup) == [("k", 1)]
            marker = tmp_path / "deserialized"
            payload = pickle.dumps((Exploit(str(marker)), pickle.dumps([Exploit(str(marker))])))
            forged = struct.pack(">I", len(payload) | OVERTAKING) + payload + os.urandom(MAC_BYTES)
            assert proxy.inject("to_target", forged) == 1
            with pytest.raises(ChannelClosedError, match="does not carry the sender's MAC"):
                _poll(inbound, wakeup)
        assert not marker.exists(), "the injected pickle was deserialized"
    finally:
        server.close()


def test_review_credit_does_not_drift_after_many_overtaking_barriers_with_carried_frames() -> None:
    """Over TCP: a hundred overtaking barriers, each carrying a partial frame beyond the
    credit, between full windows of credited frames: the receiver never finds the
    sender beyond its credit, and the sender ends with exactly its capacity again."""

    server = ExchangeServer(b"s" * 32)
    try:
        inbound, outbound, wakeup = _connected(server, 3)
        for n in range(1, 101):
            for i in range(3):
                outbound.send([n, i])  # every credit taken
            outbound.send_overtaking(
                Barrier(Trigger(n, 1, "checkpoint", f"file:///chk-{n}", 0, False)), [n, "p"]
            )
            received = [_poll_until(inbound, wakeup) for _ in range(5)]
            assert sum(isinstance(r, OvertakingBarrier) for r in received) == 1
            assert [r for r in received if not isinstance(r, OvertakingBarrier)] == [
                [n, 0],
                [n, 1],
                [n, 2],
                [n, "p"],
            ]
        for i in range(3):
            outbound.send(["last", i])
        fourth = threading.Event()
        sender = threading.Thread(target=lambda: (outbound.send(["last", 3]), fourth.set()))
        sender.start()
        assert not fourth.wait(0.3), "the sender had more credit than the receiver's capacity"
        assert _poll_until(inbound, wakeup) == ["last", 0]
        assert fourth.wait(10)
        sender.join()
    finally:
        server.close()


@pytest.mark.parametrize(
    "argv",
    [
        ["--aligned-checkpoint-timeout", "5m", "--checkpoint-timeout", "10s"],
        ["--aligned-checkpoint-timeout", "10s", "--checkpoint-timeout", "10s"],
    ],
)
def test_review_an_aligned_checkpoint_timeout_no_checkpoint_lives_to_reach_is_refused(
    tmp_path: Path, argv: list[str]
) -> None:
    """Every checkpoint is aborted by its timeout before its alignment could last the
    aligned-checkpoint timeout: under backpressure none ever goes unaligned, and the
    option the user set to keep checkpoints completing silently does nothing."""
    message = refusal(tmp_path, WORD_COUNT, *ARGS, *argv)
    assert "alignedCheckpointTimeout" in message or "--aligned-checkpoint-timeout" in message, message
    assert "timeout" in message.replace("alignedCheckpointTimeout", ""), message


class _Completions:
    def __init__(self) -> None:
        self.paths: list[str] = []

    def completed(self, checkpoint: Any) -> None:
        if not checkpoint.final:
            self.paths.append(checkpoint.path)

    def aborted(self, trigger: Any, reason: str) -> None:
        pass

    def restarted(self) -> None:
        pass


async def test_review_a_restored_subtask_keeps_no_channel_state_once_it_has_replayed_it(
    tmp_path: Path,
) -> None:
    """Each new subtask reads every old subtask's channel-state file and keeps all of it
    (every key group, its own or not) in `KeyedVertexState` for the launch's life,
    after its gate has replayed its share. The shares themselves are right: together
    they are the checkpoint's channel state, each record once."""
    store = InMemoryStore()
    args = {"count": "3200", "keys": str(KEYS), "slow_ms": "4", "output": f"file://{tmp_path}/out"}
    spec = _spec(tmp_path, "tests.jobs.configurable:slow_running_sum", store, args)
    spec = replace(spec, unaligned_after_s=0.0, in_flight_target_s=None, batch_size=64, channel_capacity=8)
    listener = _Completions()
    config = CheckpointConfig(interval_s=0.2, timeout_s=5, tolerable_failures=1000, retained=100)
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    master = JobMaster(spec, ThreadStage(), storage, config, listener=listener)
    await asyncio.wait_for(master.run(restart_strategy("none")), 120)
    in_flight = [(p, n) for p in listener.paths if (n := _records_in(p))]
    assert in_flight, "no checkpoint with channel state"
    path, records = in_flight[0]
    metadata = read_metadata(CheckpointStorage(path), CheckpointStorage(path).root)
    point = RestorePoint(path, metadata)
    vertex = spec.graph().vertex("sum")
    replayed: Counter[tuple[Any, ...]] = Counter()
    for index in range(3):
        state = vertex_state(vertex, index, 3, replace(spec.state, local_dir=tmp_path / f"restore-{index}"))
        state.restore(point)
        for batch in state.replay(64):
            assert isinstance(batch, list)
            replayed.update((r[0], r[3]["n"]) for r in batch)
        again = sum(len(b) for b in state.replay(64))  # type: ignore[arg-type]
        state.close()
        assert again == 0, f"subtask {index} still holds {again} channel-state records after replaying them"
    assert sum(replayed.values()) == records
    assert max(replayed.values()) == 1


def _records_in(path: str) -> int:
    state = read_metadata(CheckpointStorage(path), CheckpointStorage(path).root).vertices["sum"]
    return sum(s.channel.records for s in state.subtasks if s.channel is not None)


def test_review_a_checkpoint_with_channel_state_is_refused_by_a_lockgate_that_cannot_replay_it() -> None:
    """Every earlier Lockgate reads `_metadata` format version 1 and ignores the
    `channel` field it does not know: restoring a checkpoint taken unaligned (an
    image rolled back, an upgrade whose savepoint failed restoring the latest
    checkpoint) it would drop the records in flight without a word. A checkpoint
    with channel state must carry a format version those releases refuse; one
    without stays readable by them."""
    channel = ChannelStateHandle(FileRef("sum/0/channel", 10, 0, "0" * 64), 3)
    subtasks = (SubtaskState(0, channel=channel),)
    unaligned = CheckpointMetadata("job", 7, "checkpoint", 0, {"sum": VertexState(2, 128, subtasks)})
    aligned = replace(unaligned, vertices={"sum": VertexState(2, 128, (SubtaskState(0),))})
    assert aligned.to_json()["format_version"] == 1
    assert unaligned.to_json()["format_version"] != 1, (
        "an earlier Lockgate would restore it without its channel state"
    )
    assert CheckpointMetadata.from_json(unaligned.to_json()) == unaligned


async def test_review_event_time_windows_rescaled_from_an_unaligned_stop_checkpoint_are_exact(
    tmp_path: Path,
) -> None:
    """A slow tumbling-window count behind a fast log source with watermarks: an in-place
    rescale 2 -> 3 stops at a checkpoint taken unaligned, whose channel state (records
    with event time) the new launch replays before new input and new watermarks. Every
    window's count is exact and emitted once."""
    events_dir = tmp_path / "events"
    events_dir.mkdir()
    events = [{"user": n % 7, "ts": n * 997 % 600_000} for n in range(3_000)]
    for p in range(3):
        mine = sorted((e for i, e in enumerate(events) if i % 3 == p), key=lambda e: e["ts"])
        (events_dir / f"part-{p}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in mine))
    store = InMemoryStore()
    out = f"file://{tmp_path}/out"
    args = {"input": f"file://{events_dir}", "output": out, "slow_ms": "2"}
    spec = _spec(tmp_path, "tests.jobs.unaligned_review:slow_window_counts", store, args)
    spec = replace(spec, unaligned_after_s=0.0, in_flight_target_s=None, batch_size=32, channel_capacity=8)
    config = CheckpointConfig(interval_s=0.2, timeout_s=30, retained=100)
    master = JobMaster(spec, ThreadStage(), CheckpointStorage(f"file://{tmp_path}/checkpoints"), config)
    run = asyncio.create_task(master.run(restart_strategy("none")))

    def committed() -> int:
        try:
            return len(read_committed(out))
        except FileNotFoundError:
            return 0

    await eventually(lambda: committed() > 0, "a window committed", timeout_s=60)
    request = await request_rescale(store, spec.keys, 3, expires_in_s=60)
    answer = await await_rescale(store, spec.keys, request, 60)
    assert (answer.status, answer.parallelism) == ("rescaled", 3), answer
    assert answer.checkpoint_id is not None
    in_flight = _channel_records(tmp_path, answer.checkpoint_id, "per-minute")
    result = await asyncio.wait_for(run, 120)
    assert result.restarts == 0
    got = [(r["user"], r["start"], r["n"]) for r in read_committed(out)]
    assert len(got) == len({(u, s) for u, s, _ in got}), "a window emitted twice"
    expected = Counter((e["user"], e["ts"] // 60_000 * 60_000) for e in events)
    assert {(u, s): n for u, s, n in got} == dict(expected)
    assert in_flight, "the stop checkpoint held no records in flight: nothing shown"
