"""Where a source puts the records it cannot read: its dead-letter policy.

A source given `dead_letter=URL` writes each record it cannot read (not in its
format, or too large for the exchange) to that directory as a JSON line saying
where the record was, why it was set aside, and what of it can be kept, and
reads on. The directory is written as a `FileSink` writes (`dead-letter~…`
files): the reader pre-commits its dead letters at each barrier and commits
them with the checkpoint, so a replay after a restore writes none twice.
Without one (the policy "fail", the default) such a record stops the job with
`UnreadableRecordError`, naming the record and the option: a restart would
only read it again.
"""

from __future__ import annotations

from typing import Any

from lockgate.runtime.api.connectors import (
    Committer,
    JobIdentity,
    SinkWriter,
    SubtaskContext,
    UnreadableRecordError,
)
from lockgate.runtime.connectors.file_sink import FileSink

DEAD_LETTER_PREFIX = "dead-letter"


class DeadLetterPolicy:
    """A source's policy: `url` None fails the job on an unreadable record."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self._sink = None if url is None else FileSink(url, DEAD_LETTER_PREFIX)

    def validate(self, job: JobIdentity) -> None:
        if self._sink is not None:
            self._sink.validate(job)

    def open(self, context: SubtaskContext) -> DeadLetters:
        return DeadLetters(None if self._sink is None else self._sink.create_writer(context))


class DeadLetters(Committer):
    """One reader's dead letters, committed with its checkpoints."""

    def __init__(self, writer: SinkWriter | None) -> None:
        self._writer = writer

    def put(self, entry: dict[str, Any], refusal: UnreadableRecordError) -> None:
        """`entry` (a JSON object) to the dead-letter location, or `refusal` raised
        when there is none."""
        if self._writer is None:
            raise refusal from None
        self._writer.write(entry)

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        return [] if self._writer is None else self._writer.pre_commit(checkpoint_id)

    def commit(self, committables: list[Any]) -> None:
        if self._writer is not None:
            self._writer.commit(committables)

    def recover(self, committables: list[Any]) -> None:
        if self._writer is not None:
            self._writer.recover(committables)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
