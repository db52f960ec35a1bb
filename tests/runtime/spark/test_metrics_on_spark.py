"""A job on Spark serves its metrics: the driver's, and every task's on the first
free port of a range, scraped over HTTP while the job runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.polling import eventually_true
from tests.runtime.engine.test_local_engine import _write_lines
from tests.runtime.metrics.metered_job import MeteredJob, free_port_range
from tests.runtime.metrics.scrape import Sample, scrape, series, total


async def test_a_running_job_serves_driver_and_task_metrics(
    spark, etcd, etcd_config, keys, tmp_path: Path
) -> None:
    words = _write_lines(tmp_path / "lines", partitions=4, lines=300)
    task_ports = free_port_range(10)
    job = MeteredJob.start(
        spark,
        etcd_config,
        keys,
        tmp_path,
        "tests.jobs.configurable:word_count",
        {"input": f"file://{tmp_path}/lines", "output": f"file://{tmp_path}/out"},
        task_ports=task_ports,
        interval_s=0.3,
    )
    tasks: list[Sample] = []
    try:

        async def tasks_report_everything() -> bool:
            assert not job.run.done(), job.run.exception() if job.run.done() else ""
            nonlocal tasks
            scraped = [await asyncio.to_thread(scrape, p) for p in job.task_port_numbers()]
            tasks = [s for each in scraped for s in each]
            return (
                total(tasks, "lockgate_records_in_total", vertex="out") == len(words)
                and len(series(tasks, "lockgate_state_size_bytes", vertex="count")) == 2
                and total(tasks, "lockgate_source_lag_bytes", vertex="lines") == 0
                and total(tasks, "lockgate_checkpoint_alignment_seconds_count", vertex="count") >= 2
            )

        await eventually_true(tasks_report_everything, "both tasks report every record and a checkpoint", 120)
        await job.stop_with_savepoint(etcd)
        labels = {"job_namespace": keys.namespace, "job_id": keys.job}
        assert {s.labels["subtask"] for s in series(tasks, "lockgate_records_out_total", vertex="lines")} == {
            "0",
            "1",
        }, "each task labels its subtask"
        assert total(tasks, "lockgate_records_out_total", vertex="lines", **labels) == 1200, (
            "4 partitions x 300"
        )
        assert total(tasks, "lockgate_records_in_total", vertex="words") == 1200
        assert total(tasks, "lockgate_records_out_total", vertex="words") == len(words)
        assert total(tasks, "lockgate_records_in_total", vertex="count") == len(words)
        assert all(s.value > 0 for s in series(tasks, "lockgate_state_size_bytes", vertex="count"))
        assert series(tasks, "lockgate_backpressured_seconds_total", vertex="words"), "the exchange's sender"
        busy = series(tasks, "lockgate_busy_seconds_total")
        assert {s.labels["vertex"] for s in busy} == {"lines", "count"}, "per chain, by its first vertex"
        assert total(tasks, "lockgate_busy_seconds_total", vertex="count") > 0
        assert all(0 <= s.value <= 1 for s in series(tasks, "lockgate_busy_ratio"))
        assert len(series(tasks, "lockgate_records_in_per_second", vertex="count")) == 2
        assert total(tasks, "lockgate_source_lag_known", vertex="lines") == 2, "a log tells its lag"

        driven = await asyncio.to_thread(scrape, job.driver.port)
        assert total(driven, "lockgate_checkpoints_completed_total", kind="checkpoint", **labels) >= 1
        assert total(driven, "lockgate_checkpoints_completed_total", kind="savepoint") == 1
        assert total(driven, "lockgate_checkpoint_size_bytes") > 0
        assert total(driven, "lockgate_restarts_total") == 0
        assert total(driven, "lockgate_job_parallelism") == 2
        assert total(driven, "lockgate_checkpoint_interval_seconds") == 0.3
    finally:
        job.close()
    assert await asyncio.to_thread(scrape, task_ports.first) == [], "a task's server ends with it"
