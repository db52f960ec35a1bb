"""Jobs configured by their args, as `lockgate run JOB --arg k=v` and Spark tasks build them."""

from __future__ import annotations

from lockgate.runtime import FileSink, GeneratorSource, LogSource, StreamEnvironment

from tests.jobs import counting
from tests.jobs.functions import CountWords, SlowRunningSum


def word_count(env: StreamEnvironment) -> None:
    bounded = env.args.get("bounded") == "true"  # the files hold all there is
    source = LogSource(env.args["input"], dead_letter=env.args.get("dead_letter"), bounded=bounded)
    counting.word_count(env, source, env.args["output"])


def running_sum(env: StreamEnvironment) -> None:
    count = env.args.get("count", "10000")
    source = GeneratorSource(
        None if count == "unbounded" else int(count),
        keys=int(env.args.get("keys", "37")),
        partitions=int(env.args.get("partitions", "4")),
        rate=float(env.args["rate"]) if "rate" in env.args else None,
    )
    counting.running_sum(env, source, env.args["output"], env.args.get("source_name", "numbers"))


def offsets_committing_sum(env: StreamEnvironment) -> None:
    """`running_sum` over a source that pre-commits its offsets at every checkpoint."""
    source = GeneratorSource(int(env.args["count"]), keys=int(env.args["keys"]), partitions=4)
    counting.running_sum(env, counting.OffsetsCommittingSource(source), env.args["output"])


def failing_running_sum(env: StreamEnvironment) -> None:
    """`running_sum` that fails once, at record `fail_at` or later, after the output of
    `checkpoints` checkpoints was committed, unless the file `flag` exists."""
    output = env.args["output"]
    fail = counting.FailOnce(
        int(env.args["fail_at"]),
        env.args["flag"],
        committed_dir=output.removeprefix("file://"),
        checkpoints=int(env.args.get("checkpoints", "1")),
    )
    source = GeneratorSource(
        int(env.args["count"]),
        keys=int(env.args.get("keys", "41")),
        partitions=int(env.args.get("partitions", "6")),
        rate=float(env.args["rate"]) if "rate" in env.args else None,
    )
    counting.failing_running_sum(env, source, output, fail)


def sums_and_words(env: StreamEnvironment) -> None:
    """Two pipelines in one job: a rate-held generator's running sums (its lag is in
    records) and a word count over a log (its lag is in bytes)."""
    source = GeneratorSource(None, keys=37, partitions=4, rate=float(env.args.get("rate", "2000")))
    counting.running_sum(env, source, f"{env.args['output']}/sums")
    lines = LogSource(env.args["input"])
    (
        env.source(lines, name="lines")
        .flat_map(lambda line: line["text"].split(), name="words")
        .key_by(lambda word: word)
        .process(CountWords(), name="count")
        .sink(FileSink(f"{env.args['output']}/words"), name="words-out")
    )


def slow_running_sum(env: StreamEnvironment) -> None:
    """`running_sum` whose keyed operator takes `slow_ms` per record behind a source
    that reads as fast as it can: the exchange into it stays full (backpressure)."""
    source = counting.unthrottled_numbers(env)
    (
        env.source(source, name="numbers")
        .key_by(lambda record: record["key"])
        .process(SlowRunningSum(float(env.args["slow_ms"]) / 1000), name="sum")
        .sink(FileSink(env.args["output"]), name="out")
    )
