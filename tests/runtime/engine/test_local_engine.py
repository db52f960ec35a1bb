"""The engine end to end in one process: exact output with checkpoints running."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from pathlib import Path

import pytest
from lockgate.runtime import GeneratorSource, LogSource, StreamEnvironment, read_committed
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.engine.job_master import JobMaster
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.exactness import assert_running_sums_exact, assert_word_counts_exact
from tests.jobs.counting import (
    InFlight,
    SlowSink,
    running_sum,
    slow_sink_sum,
    word_count,
)
from tests.runtime.engine.harness import Run, run_job


def _write_lines(directory: Path, partitions: int, lines: int) -> list[str]:
    rng = random.Random(11)
    vocabulary = [f"w{i}" for i in range(50)]
    directory.mkdir(parents=True)
    words = []
    for p in range(partitions):
        with open(directory / f"part-{p}.jsonl", "w") as f:
            for _ in range(lines):
                line = [rng.choice(vocabulary) for _ in range(rng.randint(1, 8))]
                words += line
                f.write(json.dumps({"text": " ".join(line)}) + "\n")
    return words


@pytest.mark.parametrize(
    ("parallelism", "exchange"), [(1, "memory"), (2, "memory"), (3, "memory"), (2, "tcp"), (3, "tcp")]
)
async def test_word_count_is_exact(etcd_config, keys, tmp_path: Path, parallelism: int, exchange) -> None:
    words = _write_lines(tmp_path / "lines", partitions=4, lines=300)
    env = StreamEnvironment("wc")
    word_count(env, LogSource(f"file://{tmp_path}/lines"), f"file://{tmp_path}/out")
    backend = "rocksdb" if parallelism != 2 else "heap"
    await run_job(etcd_config, keys, tmp_path, env.graph(), Run(parallelism, backend, exchange))

    output = read_committed(f"file://{tmp_path}/out")
    assert_word_counts_exact(output, words)


@pytest.mark.parametrize("parallelism", [1, 2, 3])
async def test_keyed_running_sum_is_exact(etcd_config, keys, tmp_path: Path, parallelism: int) -> None:
    env = StreamEnvironment("sum")
    running_sum(env, GeneratorSource(5000, keys=37, partitions=5), f"file://{tmp_path}/out")
    await run_job(etcd_config, keys, tmp_path, env.graph(), Run(parallelism, exchange="tcp"))

    output = read_committed(f"file://{tmp_path}/out")
    assert_running_sums_exact(output, 5000, 37)


async def test_a_bounded_job_whose_sources_commit_at_every_checkpoint_ends(
    etcd_config, tmp_path: Path
) -> None:
    """The final checkpoint's completion ends the sources even when a checkpoint was
    triggered after it: its commit never comes, and a source waiting for it hung
    the job (a Kafka source pre-commits its group offsets at every checkpoint).
    The race needs etcd's write latency. Through the job master, as a driver runs a
    job: a coordinator lease lost on a loaded machine relaunches the job, a hang
    does not end."""
    for attempt in range(40):
        out = f"file://{tmp_path}/out-{attempt}"
        spec = JobSpec(
            "tests.jobs.configurable:offsets_committing_sum",
            JobKeys("default", f"ends-{attempt}"),
            2,
            StateConfig("heap", tmp_path / str(attempt) / "local", 32),
            etcd_config,
            secret=b"s" * 32,
            args=(("count", "3000"), ("keys", "13"), ("output", out)),
            bounded=True,
        )
        storage = CheckpointStorage(f"file://{tmp_path}/{attempt}/checkpoints")
        master = JobMaster(spec, ThreadStage(), storage, CheckpointConfig(interval_s=0.02, timeout_s=30))
        await asyncio.wait_for(master.run(restart_strategy("fixed-delay", attempts=2, delay_s=0)), 60)
        assert_running_sums_exact(read_committed(out), 3000, 13)


@pytest.mark.parametrize("exchange", ["memory", "tcp"])
async def test_a_slow_sink_backpressures_the_sources_and_memory_stays_bounded(
    etcd_config, keys, tmp_path: Path, exchange
) -> None:
    count, parallelism, capacity, batch = 3000, 2, 4, 16
    tracker = InFlight(f"slow-{exchange}")
    env = StreamEnvironment("slow")
    sink = SlowSink(f"file://{tmp_path}/out", tracker.name, delay_s=0.0005)
    slow_sink_sum(env, GeneratorSource(count, keys=13, partitions=2), sink)
    run = Run(parallelism, exchange=exchange, batch_size=batch, channel_capacity=capacity)
    await run_job(etcd_config, keys, tmp_path, env.graph(), run)

    assert sorted(r["n"] for r in read_committed(f"file://{tmp_path}/out")) == list(range(count))
    # What can be in flight: full channels (P x P, `capacity` batches each), the
    # exchange's partly filled batches, and per subtask the source's batch and the
    # batch the sink is writing.
    bound = parallelism * parallelism * (capacity + 1) * batch + 2 * parallelism * batch
    assert tracker.peak <= bound, f"{tracker.peak} records in flight, more than {bound}"
    assert tracker.peak < count / 4


async def test_a_bounded_job_ends_when_drained_without_waiting_for_the_interval(
    etcd_config, keys, tmp_path: Path
) -> None:
    env = StreamEnvironment("sum")
    running_sum(env, GeneratorSource(2000, keys=7, partitions=3), f"file://{tmp_path}/out")
    run = Run(2, exchange="tcp", interval_s=3600)
    await asyncio.wait_for(run_job(etcd_config, keys, tmp_path, env.graph(), run), 60)
    assert sorted(r["n"] for r in read_committed(f"file://{tmp_path}/out")) == list(range(2000))


async def test_a_bounded_job_reads_last_lines_that_have_no_newline(etcd_config, keys, tmp_path: Path) -> None:
    words = _write_lines(tmp_path / "lines", partitions=3, lines=50)
    for p, word in enumerate(["tail0", "tail1", "tail2"]):
        with open(tmp_path / "lines" / f"part-{p}.jsonl", "a") as f:
            f.write(json.dumps({"text": word}))  # as an editor saves a file: no final newline
        words.append(word)
    env = StreamEnvironment("wc")
    word_count(env, LogSource(f"file://{tmp_path}/lines"), f"file://{tmp_path}/out")
    await run_job(etcd_config, keys, tmp_path, env.graph(), Run(2, "heap", "memory"))
    output = read_committed(f"file://{tmp_path}/out")
    assert Counter(r["word"] for r in output) == Counter(words)


async def test_dead_letters_are_committed_with_the_checkpoint(etcd_config, keys, tmp_path: Path) -> None:
    words = _write_lines(tmp_path / "lines", partitions=2, lines=40)
    with open(tmp_path / "lines" / "part-1.jsonl", "a") as f:
        f.write("{not json\n")
        f.write(json.dumps({"text": "after"}) + "\n")
    env = StreamEnvironment("wc")
    source = LogSource(f"file://{tmp_path}/lines", dead_letter=f"file://{tmp_path}/dead")
    word_count(env, source, f"file://{tmp_path}/out")
    await run_job(etcd_config, keys, tmp_path, env.graph(), Run(2, "heap", "memory"))
    assert Counter(r["word"] for r in read_committed(f"file://{tmp_path}/out")) == Counter([*words, "after"])
    (letter,) = read_committed(f"file://{tmp_path}/dead")
    assert letter["source"] == f"file://{tmp_path}/lines/part-1.jsonl:41"
