"""A late Kafka writer of an earlier launch, for the soak's "kafka-late-writer" fault:
the soak job's Kafka sink is wrapped (`HeldKafkaSink`) so that, once the harness
arms the hold, the launch fails at a sink barrier (no transaction of that writer
is open then), and the first writer the next launch creates is held before it
starts, as a GC pause or a frozen executor holds a task, until the harness
releases it. What the writer did once released is written beside the hold.

The harness and the job's tasks share the hold's directory (`--arg hold=DIR`):

    armed      the hold is armed; removed: released
    failed     claimed (O_EXCL) by the writer that failed its launch
    held       claimed by the writer that waits: "launch L subtask S"
    outcome    what the held writer did once released
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from lockgate.runtime import ForwardingSinkWriter, JobIdentity, KafkaSink, Sink, SinkWriter, SubtaskContext

_POLL_S = 0.05


class WriterHold:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def _path(self, name: str) -> Path:
        return self.directory / name

    def arm(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for name in ("failed", "held", "outcome"):
            self._path(name).unlink(missing_ok=True)
        self._path("armed").touch()

    @property
    def armed(self) -> bool:
        return self._path("armed").exists()

    def release(self) -> None:
        self._path("armed").unlink(missing_ok=True)

    def _read(self, name: str) -> str | None:
        try:
            return self._path(name).read_text()
        except FileNotFoundError:
            return None

    def held(self) -> str | None:
        """Which writer waits ("launch L subtask S"), once one does."""
        return self._read("held")

    def outcome(self) -> str | None:
        return self._read("outcome")

    def claim(self, name: str, text: str) -> bool:
        """True for the one caller that creates `name` (of several tasks, one)."""
        try:
            descriptor = os.open(self._path(name), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "w") as stream:
            stream.write(text)
        return True

    def write_outcome(self, text: str) -> None:
        self._path("outcome").write_text(text)


class _FailsWhenArmed(ForwardingSinkWriter):
    def __init__(self, inner: SinkWriter, hold: WriterHold) -> None:
        super().__init__(inner)
        self.hold = hold

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        if self.hold.armed and self.hold.held() is None and self.hold.claim("failed", str(checkpoint_id)):
            raise RuntimeError("soak: this launch fails so that the next one's first Kafka writer is held")
        return self.inner.pre_commit(checkpoint_id)


class _ReportsRecovery(ForwardingSinkWriter):
    def __init__(self, inner: SinkWriter, hold: WriterHold) -> None:
        super().__init__(inner)
        self.hold = hold

    def recover(self, committables: list[Any]) -> None:
        self.inner.recover(committables)
        self.hold.write_outcome(f"recovered {len(committables)} committable(s) and went on")


class HeldKafkaSink(Sink):
    def __init__(self, inner: KafkaSink, hold: str) -> None:
        self.inner = inner
        self.hold = hold

    def validate(self, job: JobIdentity) -> None:
        self.inner.validate(job)

    def create_writer(self, context: SubtaskContext) -> SinkWriter:
        hold = WriterHold(self.hold)
        if not (hold.armed and hold.claim("held", f"launch {context.launch} subtask {context.subtask}")):
            return _FailsWhenArmed(self.inner.create_writer(context), hold)
        while hold.armed:
            time.sleep(_POLL_S)  # polling for the harness's release
        try:
            writer = self.inner.create_writer(context)
        except Exception as error:
            hold.write_outcome(f"refused: {error}")
            raise
        return _ReportsRecovery(writer, hold)
