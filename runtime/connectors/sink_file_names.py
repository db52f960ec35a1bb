"""The names of a FileSink's files, which say whose each file is.

    .{prefix}~{namespace}~{job}~{subtask}-{launch}-{attempt}-{sequence}.inprogress
    _{prefix}~{namespace}~{job}~{subtask}-{launch}-{attempt}-{sequence}.pending
     {prefix}~{namespace}~{job}~{subtask}-{launch}-{attempt}-{sequence}-chk{n}.jsonl

Job ids, namespaces and prefixes never contain `~`, so a name splits into its
parts one way only: recovery can tell its own job's hidden files from another
job's in the same directory, and two jobs never make the same final name. The
attempt (random) tells apart two writers that claim the same launch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from lockgate.runtime.api.connectors import JobIdentity

SEPARATOR = "~"
# Most file systems take names of at most 255 bytes.
MAX_NAME_BYTES = 255
# The widest a name's numbers get: subtask, launch, sequence and checkpoint id.
_WIDEST_NUMBER = 10**12

_HIDDEN = re.compile(r"^(?:\.(?P<stem_ip>.+)\.inprogress|_(?P<stem_p>.+)\.pending)$")
_WRITER = re.compile(r"^(?P<subtask>\d+)-(?P<launch>\d+)-(?P<attempt>[0-9a-f]{8})-(?P<sequence>\d+)$")


@dataclass(frozen=True)
class FileName:
    """One transaction's file: whose it is and its place in its writer's sequence."""

    prefix: str
    job: JobIdentity
    subtask: int
    launch: int
    attempt: str
    sequence: int

    def next(self) -> FileName:
        return replace(self, sequence=self.sequence + 1)

    @property
    def stem(self) -> str:
        owner = SEPARATOR.join([self.prefix, self.job.namespace, self.job.job])
        return f"{owner}{SEPARATOR}{self.subtask}-{self.launch}-{self.attempt}-{self.sequence}"

    @property
    def in_progress(self) -> str:
        return f".{self.stem}.inprogress"

    @property
    def pending(self) -> str:
        return f"_{self.stem}.pending"

    def final(self, checkpoint_id: int) -> str:
        return f"{self.stem}-chk{checkpoint_id}.jsonl"


def parse_hidden(name: str) -> FileName | None:
    """The parts of an in-progress or pending file's name; None for any other name."""
    hidden = _HIDDEN.match(name)
    if hidden is None:
        return None
    parts = (hidden["stem_ip"] or hidden["stem_p"]).split(SEPARATOR)
    if len(parts) != 4:
        return None
    prefix, namespace, job, writer = parts
    numbers = _WRITER.match(writer)
    if numbers is None:
        return None
    return FileName(
        prefix,
        JobIdentity(namespace, job),
        int(numbers["subtask"]),
        int(numbers["launch"]),
        numbers["attempt"],
        int(numbers["sequence"]),
    )


def check_prefix(prefix: str) -> None:
    if not prefix or "/" in prefix or SEPARATOR in prefix or prefix.startswith((".", "_")):
        raise ValueError(
            f"FileSink prefix {prefix!r} must be a plain, visible file name prefix: not empty, "
            f"without '/' or '{SEPARATOR}', not starting with '.' or '_'"
        )


def check_name_length(url: str, prefix: str, job: JobIdentity) -> None:
    """Refuse a job whose writers could make a name longer than file systems take."""
    n = _WIDEST_NUMBER
    widest = FileName(prefix, job, n, n, "0" * 8, n)
    longest = max(len(widest.in_progress.encode()), len(widest.final(n).encode()))
    if longest > MAX_NAME_BYTES:
        raise ValueError(
            f"{url}: the names of job {job}'s files would take up to {longest} bytes, "
            f"more than the {MAX_NAME_BYTES} most file systems allow; shorten the job id, "
            "its namespace or the sink's prefix"
        )
