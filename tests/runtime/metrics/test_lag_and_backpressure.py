"""What the task metrics read: a source's backlog and a channel's blocked time."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from lockgate.runtime import Backlog, GeneratorSource, LogSource
from lockgate.runtime.engine.channels import LocalChannel
from lockgate.runtime.metrics.serving import PortRange, serve
from prometheus_client import CollectorRegistry

from tests.runtime.connectors.subtasks import open_reader


def test_a_log_source_lags_by_the_bytes_appended_and_not_read(tmp_path: Path) -> None:
    line = json.dumps({"text": "a b"}).encode() + b"\n"
    (tmp_path / "part-0.jsonl").write_bytes(line * 10)
    reader = open_reader(LogSource(f"file://{tmp_path}"), 0, 1, {})
    assert reader.backlog() == Backlog(bytes=10 * len(line))
    assert len(reader.poll(4)) == 4
    assert reader.backlog() == Backlog(bytes=6 * len(line))
    reader.poll(100)
    assert reader.backlog() == Backlog(bytes=0)
    with open(tmp_path / "part-0.jsonl", "ab") as log:
        log.write(line * 3)
    assert reader.backlog() == Backlog(bytes=3 * len(line)), "appended input is lag until read"


def test_a_generator_lags_by_what_its_rate_made_due() -> None:
    now = [0.0]
    source = GeneratorSource(None, partitions=2, rate=100.0, clock=lambda: now[0])
    reader = open_reader(source, 0, 1, {})
    now[0] = 2.0
    assert reader.backlog() == Backlog(records=200)
    reader.poll(150)
    assert reader.backlog() == Backlog(records=50)
    bounded = open_reader(GeneratorSource(10, partitions=3), 0, 1, {})
    bounded.poll(4)
    assert bounded.backlog() == Backlog(records=6), "bounded, no rate: the records left"
    assert open_reader(GeneratorSource(None), 0, 1, {}).backlog() is None, "unbounded, no rate: unknown"


def test_a_full_channel_counts_the_time_its_sender_waited() -> None:
    channel = LocalChannel(capacity=1)
    channel.send([1])
    assert channel.blocked_s == 0.0, "room was there"
    held_for_s = 0.2

    def slow_consumer() -> None:
        time.sleep(held_for_s)  # the consumer's slowness is what is measured
        channel.poll()

    consumer = threading.Thread(target=slow_consumer)
    consumer.start()
    channel.send([2])
    consumer.join()
    assert held_for_s * 0.8 <= channel.blocked_s < held_for_s + 1.0


def test_a_busy_port_moves_the_server_to_the_next_of_its_range() -> None:
    first = serve(CollectorRegistry(), PortRange(0, 0), "127.0.0.1")
    assert first is not None
    try:
        second = serve(CollectorRegistry(), PortRange(first.port, first.port + 1), "127.0.0.1")
        assert second is not None
        try:
            assert second.port == first.port + 1
            assert serve(CollectorRegistry(), PortRange(first.port, first.port + 1), "127.0.0.1") is None, (
                "all taken"
            )
        finally:
            second.close()
    finally:
        first.close()


@pytest.mark.parametrize("text", ["9250-9249", "http", "70000", "9250-"])
def test_a_bad_port_range_is_named(text: str) -> None:
    with pytest.raises(ValueError, match=f"metrics port range {text!r}"):
        PortRange.parse(text)
