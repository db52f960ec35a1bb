"""CollectSink: exactly once through a failure and a restore, in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime import CollectSink, GeneratorSource, StreamEnvironment
from lockgate.runtime.connectors.file_sink import SinkCommitError

from tests.jobs.counting import FailOnce, RunningSum
from tests.runtime.connectors.subtasks import open_writer
from tests.runtime.engine.harness import Run, run_job

COUNT = 6000


class FailOnceAfterCollect(FailOnce):
    def _has_committed_output(self) -> bool:
        return bool(CollectSink.committed(self.committed_dir))


def _graph(name: str, fail: FailOnce) -> Any:
    env = StreamEnvironment("collect")
    (
        env.source(GeneratorSource(COUNT, keys=11, partitions=4, rate=6000), name="numbers")
        .map(fail, name="chaos")
        .key_by(lambda record: record["key"])
        .process(RunningSum(), name="sum")
        .sink(CollectSink(name), name="out")
    )
    return env.graph()


async def test_committed_records_are_exactly_once_across_a_restart(etcd_config, keys, tmp_path: Path) -> None:
    name = f"collect-{keys.job}"
    CollectSink.reset(name)
    graph = _graph(name, FailOnceAfterCollect(COUNT // 4, str(tmp_path / "failed"), name))
    run = Run(2, interval_s=0.05, batch_size=32)
    with pytest.raises(RuntimeError, match="injected failure"):
        await run_job(etcd_config, keys, tmp_path, graph, run)
    assert 0 < len(CollectSink.committed(name)) < COUNT
    assert await run_job(etcd_config, keys, tmp_path, graph, run) > 0
    assert sorted(r["n"] for r in CollectSink.committed(name)) == list(range(COUNT))


def test_a_commit_where_nobody_opened_the_list_is_an_error_not_a_silent_loss() -> None:
    """As on a Spark executor: the list would live in a process nobody reads."""
    writer = open_writer(CollectSink("elsewhere"))
    writer.write({"n": 1})
    with pytest.raises(SinkCommitError, match=r"CollectSink 'elsewhere' is not open in this process"):
        writer.commit(writer.pre_commit(1))


@pytest.mark.parametrize("name", ["", None, 3])
def test_a_name_that_is_not_a_string_is_refused(name: Any) -> None:
    with pytest.raises(ValueError, match="must be a non-empty string"):
        CollectSink(name)
