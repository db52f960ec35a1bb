"""Jobs configured by their args, as `lockgate run JOB --arg k=v` and Spark tasks build them."""

from __future__ import annotations

from lockgate.runtime import GeneratorSource, LogSource, StreamEnvironment

from tests.jobs import counting


def word_count(env: StreamEnvironment) -> None:
    counting.word_count(env, LogSource(env.args["input"]), env.args["output"])


def running_sum(env: StreamEnvironment) -> None:
    count = env.args.get("count", "10000")
    source = GeneratorSource(
        None if count == "unbounded" else int(count),
        keys=int(env.args.get("keys", "37")),
        partitions=int(env.args.get("partitions", "4")),
        rate=float(env.args["rate"]) if "rate" in env.args else None,
    )
    counting.running_sum(env, source, env.args["output"])
