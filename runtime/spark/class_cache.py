"""A class-data-sharing archive of the local driver JVM, for a faster start.

Spark's driver JVM loads some ten thousand classes before a session is ready;
on this project's 2-core machine that is most of the 4 s a local session
takes. Java 17 can archive the classes a run loaded (`-XX:ArchiveClassesAtExit`)
and map them on the next start (`-XX:SharedArchiveFile`): the session is then
ready in under 2 s. The archive is made once per Java and Spark install, by
the first local run, as that run's JVM exits (some seconds, said on stderr).

The archive is about 100 MiB and the JVM trusts it, so it is guarded:
- It is written under a name of its own and published (renamed into place)
  only after the JVM that wrote it exited cleanly; a run killed mid-dump
  leaves nothing another run would use.
- A truncated archive crashes the JVM, and one changed in place is refused by
  it with a warning on every start: its size and CRC-32 are recorded beside
  it and checked before every use (about 50 ms); a mismatch discards it, and
  that run writes a new one.
- A JVM that fails to start with it anyway is started again without it; if
  that one starts, the archive is discarded (`session.command_session`).
- A JVM that cannot write an archive (no base archive: `-Xshare:off` in
  `JAVA_TOOL_OPTIONS`, a JDK built without one) refuses to start when asked
  to; it is started again without, and a marker keeps later runs from asking.
- A cache directory that cannot be used (no home, not writable, a path with
  spaces, which Spark's option splitting would cut) means no cache, said once.
The name is derived from the Java binary, the options every JVM reads from the
environment and the pyspark install, so a change of any makes a new archive
instead of offering a stale one. Another install's archive is kept while it
is one of the `KEPT_ARCHIVES` used last and used within `UNUSED_DAYS`: two
installs sharing a cache (a project's virtualenv and the demo's) keep theirs,
and an upgrade's old archive goes once two newer ones were used.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import pyspark
from lockgate.runtime.spark.java import spark_java

UNUSED_DAYS = 30
KEPT_ARCHIVES = 2  # this install's and the one used before it: ~100 MiB each

# The JVM writing the archive warns of every class it leaves out (about 140
# lines on the user's terminal); its errors still show.
QUIET_DUMP = "-Xlog:cds*=error"


def cache_root() -> Path:
    """`$LOCKGATE_CACHE_DIR`, else `$XDG_CACHE_HOME/lockgate`, else `~/.cache/lockgate`."""
    explicit = os.environ.get("LOCKGATE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "lockgate"


@dataclass(frozen=True)
class ClassCache:
    archive: Path
    pending: Path  # where this process's JVM dumps, before it is published

    @staticmethod
    def under(root: Path) -> ClassCache | None:
        """The archive for this Java and this pyspark under `root`; None without a
        java or where this JVM cannot write one."""
        java = spark_java()
        if java is None:
            return None
        jvm_environment = [os.environ.get(v, "") for v in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS")]
        spark = [pyspark.__version__, str(Path(pyspark.__file__).parent)]
        identity = ":".join([str(java), str(java.stat().st_mtime_ns), *jvm_environment, *spark])
        name = "driver-" + hashlib.sha256(identity.encode()).hexdigest()[:16]
        directory = root / "jvm"
        if any(c.isspace() or c in "\"'" for c in str(directory)):
            raise OSError(f"{directory}: Spark splits JVM options at spaces and quotes")
        cache = ClassCache(directory / f"{name}.jsa", directory / f"{name}.{os.getpid()}.pending")
        return None if cache._unsupported.exists() else cache

    @property
    def _unsupported(self) -> Path:
        return self.archive.with_suffix(".unsupported")

    def mark_unsupported(self, why: str) -> None:
        """This JVM refused to start when asked to write an archive: never ask it again."""
        self._unsupported.write_text(why)

    @property
    def _check_record(self) -> Path:
        return self.archive.with_suffix(".check")

    def usable(self) -> bool:
        """The archive is there and whole (its recorded size and CRC-32); a damaged
        one is discarded."""
        try:
            whole = self._check_record.read_text() == _check_of(self.archive)
        except OSError:
            whole = False
        if not whole:
            self.discard()
        return whole

    def jvm_options(self) -> tuple[str, bool]:
        """Map the archive if it is usable; else have this JVM write one as it exits
        (then the second value is True)."""
        self.archive.parent.mkdir(parents=True, exist_ok=True)
        self._remove_leftovers()
        if self.usable():
            os.utime(self._check_record)  # in use: not another install's to remove
            return f"-XX:SharedArchiveFile={self.archive}", False
        return f"-XX:ArchiveClassesAtExit={self.pending} {QUIET_DUMP}", True

    def _remove_leftovers(self) -> None:
        """What runs killed while dumping left (~100 MiB each), and the archives of
        other installs unused for UNUSED_DAYS or older than the KEPT_ARCHIVES used last."""
        unused_since = time.time() - UNUSED_DAYS * 86400
        others: dict[str, float] = {}  # another install's archive name -> when last used
        for path in self.archive.parent.iterdir():
            parts = path.name.split(".")
            if len(parts) == 3 and parts[2] in ("pending", "check") and parts[1].isdigit():
                if not _alive(int(parts[1])):
                    _remove(path)
            elif path.stem != self.archive.stem:
                record = path.with_suffix(".check")
                used = record.stat().st_mtime if record.exists() else 0.0
                others[path.stem] = used
        ranked = sorted(others, key=others.__getitem__, reverse=True)
        for rank, stem in enumerate(ranked):
            if rank >= KEPT_ARCHIVES - 1 or others[stem] < unused_since:
                for path in self.archive.parent.glob(f"{stem}.*"):
                    if len(path.name.split(".")) == 2:  # not a dump under way
                        _remove(path)

    def publish(self, jvm_exit_code: int | None) -> bool:
        """After the JVM exited: put what it wrote in place if it exited cleanly."""
        try:
            if jvm_exit_code != 0 or not self.pending.exists() or self.pending.stat().st_size == 0:
                return False
            staged = self.pending.with_suffix(".check")
            staged.write_text(_check_of(self.pending))
            # The record first: an archive without its record is discarded, never trusted.
            os.replace(staged, self._check_record)
            os.replace(self.pending, self.archive)
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                self.pending.unlink()

    def discard(self) -> None:
        for path in (self.archive, self._check_record):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _check_of(path: Path) -> str:
    """Size and CRC-32 of the file at `path`."""
    crc = 0
    with open(path, "rb") as archive:
        while chunk := archive.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return f"{path.stat().st_size} {crc:08x}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
