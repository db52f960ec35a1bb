"""`FileSink(url)`: JSON lines, exactly once through two-phase commit.

Each subtask writes the records of an epoch into a hidden in-progress file
(`.part~…inprogress`). At a checkpoint barrier the transaction is prepared:
the file is closed and renamed to a hidden pending file (`_part~…pending`),
and the (pending, final) names go into the checkpoint. When the checkpoint
completes, pending files are renamed to their final, visible names. Readers
see only names that start with neither `.` nor `_`.

Every name carries the job, the subtask and the launch that wrote it
(`sink_file_names`), so several jobs can share a directory. After a restore,
the pending files the checkpoint holds are committed (a rename is idempotent:
done twice, the second finds the final file), and the hidden files earlier
launches of this job left are deleted (`sink_leftovers`); other jobs' files are
left alone.

The output location is checked before anything runs: by `validate` on the
driver, and again by each writer when it starts (`output_location`).
"""

from __future__ import annotations

import logging
import posixpath
import uuid
from typing import Any

import fsspec
from lockgate.runtime.api.connectors import JobIdentity, Sink, SinkWriter, SubtaskContext
from lockgate.runtime.connectors.file_transaction import Committable, Transaction
from lockgate.runtime.connectors.json_lines import decode_line, encode_line
from lockgate.runtime.connectors.output_location import check_url, open_directory, paths_in
from lockgate.runtime.connectors.sink_file_names import FileName, check_name_length, check_prefix
from lockgate.runtime.connectors.sink_leftovers import leftovers

log = logging.getLogger(__name__)

# The launch of the driver's probe file: before every launch of a job, so a probe
# a crash left behind is an earlier launch's leftover, which writer 0 deletes.
_DRIVER_LAUNCH = 0


class SinkCommitError(RuntimeError):
    """A pre-committed file is gone: committing it would lose records."""


class FileSink(Sink):
    """JSON lines into the directory `url` (any fsspec URL), exactly once: files named
    `<prefix>-…` become visible when the checkpoint holding them completes."""

    def __init__(self, url: str, prefix: str = "part") -> None:
        check_prefix(prefix)
        check_url(url)
        self.url = url
        self.prefix = prefix

    def validate(self, job: JobIdentity) -> None:
        check_name_length(self.url, self.prefix, job)
        probe = FileName(self.prefix, job, 0, _DRIVER_LAUNCH, uuid.uuid4().hex[:8], 0)
        open_directory(self.url, probe.in_progress)

    def create_writer(self, context: SubtaskContext) -> FileSinkWriter:
        return FileSinkWriter(self, context)


class FileSinkWriter(SinkWriter):
    def __init__(self, sink: FileSink, context: SubtaskContext) -> None:
        check_name_length(sink.url, sink.prefix, context.job)
        first = FileName(sink.prefix, context.job, context.subtask, context.launch, uuid.uuid4().hex[:8], 0)
        self._fs, self._directory = open_directory(sink.url, first.in_progress)
        self._sink = sink
        self._context = context
        self._transaction = Transaction(self._fs, self._directory, first)

    def write(self, record: Any) -> None:
        self._transaction.write(encode_line(record))

    def write_batch(self, records: list[Any]) -> None:
        self._transaction.write(b"".join([encode_line(record) for record in records]))

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        committable = self._transaction.prepare(checkpoint_id)
        self._transaction = Transaction(self._fs, self._directory, self._transaction.name.next())
        return [] if committable is None else [committable.to_json()]

    def commit(self, committables: list[Any]) -> None:
        # Whether a file is there must be asked of the store, not of a listing cached
        # before another subtask or launch committed its share.
        self._fs.invalidate_cache(self._directory)
        for data in committables:
            committable = Committable.from_json(data)
            pending = f"{self._directory}/{committable.pending}"
            final = f"{self._directory}/{committable.final}"
            if self._fs.exists(pending):
                self._fs.mv(pending, final)
            elif not self._fs.exists(final):
                raise SinkCommitError(
                    f"{self._sink.url}: pending file {committable.pending} of a completed "
                    "checkpoint is missing; its records cannot be committed"
                )

    def recover(self, committables: list[Any]) -> None:
        """`committables`: every committable of this sink in the restored checkpoint.
        This subtask commits its round-robin share, then deletes its share of the
        hidden files earlier launches of this job left (`sink_leftovers`)."""
        ordered = sorted(Committable.from_json(c) for c in committables)
        context = self._context
        mine = [c for i, c in enumerate(ordered) if i % context.parallelism == context.subtask]
        self.commit([c.to_json() for c in mine])
        names = [posixpath.basename(path) for path in paths_in(self._fs, self._directory)]
        found = leftovers(names, self._sink.prefix, context, keep={c.pending for c in ordered})
        for name in found.delete:
            self._fs.rm(f"{self._directory}/{name}")
        if found.of_later_launches:
            log.warning(
                "%s: left alone %d hidden file(s) of job %s from launches after this one (%s), e.g. %s: "
                "a later launch is writing them, or this job's launch count began again (delete them "
                "by hand once no run of the job is live)",
                self._sink.url,
                len(found.of_later_launches),
                context.job,
                context.launch,
                found.of_later_launches[0],
            )

    def close(self) -> None:
        self._transaction.abort()


def read_committed(url: str) -> list[Any]:
    """Every record in the committed (visible) files of a FileSink directory."""
    fs, root = fsspec.core.url_to_fs(url)
    directory = root.rstrip("/") or root
    records: list[Any] = []
    for path in sorted(paths_in(fs, directory)):
        if posixpath.basename(path).startswith((".", "_")):
            continue
        with fs.open(path, "rb") as stream:
            records.extend(decode_line(line) for line in stream if line.strip())
    return records
