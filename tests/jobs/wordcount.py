"""A job module the entrypoint tests import by name, as a user's image would."""

from __future__ import annotations

from lockgate.runtime import FileSink, LogSource, StreamEnvironment

from tests.jobs.functions import CountWords


def build(env: StreamEnvironment) -> None:
    (
        env.source(LogSource("file:///tmp/lockgate-test-lines"), name="lines")
        .flat_map(lambda line: line["text"].split(), name="words")
        .key_by(lambda word: word)
        .process(CountWords(), name="count")
        .sink(FileSink("file:///tmp/lockgate-test-out"), name="out")
    )


NOT_CALLABLE = 42
