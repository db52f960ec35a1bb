"""`faulty://`: the local filesystem behind switches that a harness flips from outside.

Every process that imports this module (the driver, and each Spark Python worker
through the job module that imports it) registers the protocol with fsspec.
`faulty:///abs/path` is `/abs/path` on the local disk; while a switch in the
control file named by `$LOCKGATE_FAULTY_CONTROL` is on, the matching operations
fail as a full or broken disk would make them fail:

- `write`: "EIO" or "ENOSPC" on opening a file for writing and on every write;
- `rename`: "EIO" on `mv`;
- `delete`: "EIO" on `rm`, `rm_file`, `rmdir`;
- `slow_write_s`: each opening for writing and each write (an upload chunk, a sink
  record) first sleeps that long.

`under`, if set, limits the faults to paths below it. Processes re-read the
control file at most every `REREAD_S`, so a switch takes effect within that.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import fsspec
from fsspec.implementations.local import LocalFileOpener, LocalFileSystem

CONTROL_ENV = "LOCKGATE_FAULTY_CONTROL"
PROTOCOL = "faulty"
REREAD_S = 0.05

WriteError = Literal["EIO", "ENOSPC"]
_ERRNO = {"EIO": errno.EIO, "ENOSPC": errno.ENOSPC}


@dataclass(frozen=True)
class StorageFaults:
    """The switches: all off by default."""

    write: WriteError | None = None
    rename: Literal["EIO"] | None = None
    delete: Literal["EIO"] | None = None
    slow_write_s: float = 0.0
    under: str | None = None

    def applies_to(self, path: str) -> bool:
        return self.under is None or path.startswith(self.under)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> StorageFaults:
        return StorageFaults(**data)


@dataclass
class _ControlCache:
    path: str | None
    faults: StorageFaults = field(default_factory=StorageFaults)
    read_at: float = -1.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def current(self) -> StorageFaults:
        if self.path is None:
            return self.faults
        now = time.monotonic()
        with self.lock:
            if now - self.read_at >= REREAD_S:
                self.read_at = now
                try:
                    self.faults = StorageFaults.from_json(json.loads(Path(self.path).read_text()))
                except FileNotFoundError:
                    self.faults = StorageFaults()
                except ValueError:
                    pass  # caught mid-replace is impossible (atomic rename); keep the last switches
            return self.faults


_control = _ControlCache(os.environ.get(CONTROL_ENV))


def obey(control_file: Path | None) -> None:
    """Make this process follow `control_file` (None: no faults), as
    `$LOCKGATE_FAULTY_CONTROL` does for the processes a harness starts."""
    with _control.lock:
        _control.path = None if control_file is None else str(control_file)
        _control.faults = StorageFaults()
        _control.read_at = -1.0


def _fail(kind: str, what: str, path: str) -> OSError:
    code = _ERRNO[kind]
    return OSError(code, f"{os.strerror(code)} (injected by faulty:// on {what})", path)


def _before_write(path: str) -> None:
    faults = _control.current()
    if not faults.applies_to(path):
        return
    if faults.slow_write_s > 0:
        time.sleep(faults.slow_write_s)  # the slow upload this switch stands for
    if faults.write is not None:
        raise _fail(faults.write, "write", path)


class _FaultyFile(LocalFileOpener):  # type: ignore[misc]
    def write(self, data: Any) -> int:
        _before_write(self.path)
        return int(super().write(data))


class FaultyFileSystem(LocalFileSystem):  # type: ignore[misc]
    protocol = (PROTOCOL,)

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if "r" not in mode:
            _before_write(path)
        if self.auto_mkdir and "r" not in mode:
            self.makedirs(self._parent(path), exist_ok=True)
        return _FaultyFile(path, mode, fs=self, **kwargs)

    def mv(self, path1: str, path2: str, recursive: bool = True, **kwargs: Any) -> None:
        self._check("rename", self._strip_protocol(path1))
        super().mv(path1, path2, recursive=recursive, **kwargs)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        for one in path if isinstance(path, list) else [path]:
            self._check("delete", self._strip_protocol(one))
        super().rm(path, recursive=recursive, maxdepth=maxdepth)

    def rm_file(self, path: str) -> None:
        self._check("delete", self._strip_protocol(path))
        super().rm_file(path)

    def rmdir(self, path: str) -> None:
        self._check("delete", self._strip_protocol(path))
        super().rmdir(path)

    @staticmethod
    def _check(operation: Literal["rename", "delete"], path: str) -> None:
        faults = _control.current()
        kind = getattr(faults, operation)
        if kind is not None and faults.applies_to(path):
            raise _fail(kind, operation, path)


fsspec.register_implementation(PROTOCOL, FaultyFileSystem, clobber=True)


class StorageFaultSwitch:
    """The harness's side: writes the control file that every process reads."""

    def __init__(self, control_file: Path) -> None:
        self.control_file = control_file
        self.set(StorageFaults())

    def environment(self) -> dict[str, str]:
        """What a process started by the harness needs to obey the switches."""
        return {CONTROL_ENV: str(self.control_file)}

    def set(self, faults: StorageFaults) -> None:
        staging = self.control_file.with_suffix(".staging")
        staging.write_text(json.dumps(faults.to_json()))
        staging.replace(self.control_file)  # readers see the old or the new switches, never half
        with _control.lock:
            _control.read_at = -1.0  # this process obeys at once; others within REREAD_S

    def clear(self) -> None:
        self.set(StorageFaults())

    @property
    def settle_s(self) -> float:
        """How long until every process obeys the last `set`."""
        return REREAD_S
