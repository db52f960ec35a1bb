"""The Flink SQL settings every peer script shares, run in Flink's own virtualenv:
streaming mode, RocksDB state, an exactly-once checkpoint every 5 s into files
(the default keeps checkpoints in the job manager's memory, which refuses a
state over 5 MB), P as given."""

from __future__ import annotations

from pyflink.table import EnvironmentSettings, TableEnvironment


def streaming_environment(parallelism: int, checkpoints: str) -> TableEnvironment:
    """`checkpoints`: a directory URL of the run's own."""
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("parallelism.default", str(parallelism))
    config.set("state.backend.type", "rocksdb")
    config.set("execution.checkpointing.interval", "5 s")
    config.set("execution.checkpointing.mode", "EXACTLY_ONCE")
    config.set("execution.checkpointing.dir", checkpoints)
    return env
