"""Frames of a keyed exchange sized to what the receiver drains (engine/frame_sizing.py):
behind a slow keyed operator a record waits about the in-flight target in the
channels, not for every frame of credit full; with a fast one frames stay full."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime import Context, GeneratorSource, KeyedProcessFunction, StreamEnvironment
from lockgate.runtime.connectors.collect_sink import CollectSink
from lockgate.runtime.coordination.in_memory_store import InMemoryStore

from tests.runtime.engine.harness import Run, run_job

COUNT = 40_000


class SlowLatency(KeyedProcessFunction):
    """About 0.3 ms a record (a sleep: the source's thread keeps the GIL it needs);
    yields how long the record took from its source to here."""

    def process(self, value: Any, ctx: Context) -> Iterator[float]:
        time.sleep(0.0002)
        yield time.monotonic() - value["stamp"]


def _latencies(keys, tmp_path: Path, target_s: float | None) -> list[float]:
    name = f"latency-{target_s}"
    CollectSink.reset(name)
    env = StreamEnvironment("latency")
    (
        env.source(GeneratorSource(COUNT, keys=50, partitions=2), name="numbers")
        .map(lambda record: {**record, "stamp": time.monotonic()})
        .key_by(lambda record: record["key"])
        .process(SlowLatency(), name="slow")
        .sink(CollectSink(name), name="out")
    )
    run = Run(2, interval_s=0.5, batch_size=512, in_flight_target_s=target_s)
    asyncio.run(run_job(InMemoryStore(), keys, tmp_path / name, env.graph(), run))
    latencies = CollectSink.committed(name)
    assert len(latencies) == COUNT
    return latencies


@pytest.mark.slow
def test_behind_a_slow_operator_records_wait_about_the_target_not_every_frame_of_credit(
    keys, tmp_path: Path
) -> None:
    steady = slice(COUNT * 6 // 10, None)  # once the credit filled at the start has drained
    sized = statistics.quantiles(_latencies(keys, tmp_path, 0.05)[steady], n=10)[-1]
    full = statistics.quantiles(_latencies(keys, tmp_path, None)[steady], n=10)[-1]
    # About 0.2 s against 1.4 s on the project's 2-core machine; the rest of what
    # a sized record waits is its source's poll batch (512 records) going out.
    assert full > 0.5, f"with full frames the 90th percentile waits {full:.3f} s"
    assert sized < min(0.5, full / 3), (
        f"sized to 50 ms the 90th percentile waits {sized:.3f} s ({full:.3f} s full)"
    )
