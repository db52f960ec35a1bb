"""GeneratorSource: deterministic, split over subtasks, resumable, rate-limited."""

from __future__ import annotations

import pytest
from lockgate.runtime import GeneratorSource

from tests.runtime.connectors.subtasks import open_reader


def test_every_number_once_at_any_parallelism() -> None:
    source = GeneratorSource(1000, keys=10, partitions=6)
    for parallelism in (1, 4, 6):
        readers = [open_reader(source, i, parallelism, {}) for i in range(parallelism)]
        numbers = []
        for reader in readers:
            while records := reader.poll(64):
                numbers.extend(r["n"] for r in records)
            assert reader.reached_end()
        assert sorted(numbers) == list(range(1000))


def test_offsets_resume_at_another_parallelism() -> None:
    source = GeneratorSource(500, partitions=4)
    first = [open_reader(source, i, 2, {}) for i in range(2)]
    seen = [r["n"] for reader in first for r in reader.poll(37)]
    offsets = {k: v for reader in first for k, v in reader.offsets().items()}
    for i in range(3):
        reader = open_reader(source, i, 3, offsets)
        while records := reader.poll(50):
            seen.extend(r["n"] for r in records)
    assert sorted(seen) == list(range(500))


def test_rate_caps_records_per_second() -> None:
    now = [100.0]
    source = GeneratorSource(None, partitions=2, rate=1000, clock=lambda: now[0])
    reader = open_reader(source, 0, 1, {})
    assert reader.poll(10_000) == []
    now[0] += 0.5
    assert len(reader.poll(10_000)) == 500
    now[0] += 0.25
    assert len(reader.poll(10_000)) == 250
    assert not reader.reached_end()


def test_custom_records_and_invalid_options() -> None:
    source = GeneratorSource(3, record_fn=lambda n: f"line {n}", partitions=1)
    assert open_reader(source, 0, 1, {}).poll(10) == ["line 0", "line 1", "line 2"]
    with pytest.raises(ValueError, match="rate"):
        GeneratorSource(1, rate=0)
    with pytest.raises(ValueError, match="count"):
        GeneratorSource(-1)
