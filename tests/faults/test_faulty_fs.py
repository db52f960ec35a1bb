"""faulty:// is the local filesystem until a switch is on, then fails the way a broken
or full disk does, and only below `under`; switched off, it works again."""

from __future__ import annotations

import errno
import time
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.faults import faulty_fs
from tests.faults.faulty_fs import StorageFaults, StorageFaultSwitch


@pytest.fixture
def switch(tmp_path: Path) -> Iterator[StorageFaultSwitch]:
    switch = StorageFaultSwitch(tmp_path / "faults.json")
    faulty_fs.obey(switch.control_file)
    yield switch
    faulty_fs.obey(None)


def _flip(switch: StorageFaultSwitch, faults: StorageFaults) -> None:
    switch.set(faults)  # this process obeys at once (others within REREAD_S)


def test_without_faults_it_is_the_local_filesystem(tmp_path: Path, switch: StorageFaultSwitch) -> None:
    storage = CheckpointStorage(f"faulty://{tmp_path}/store")
    ref = storage.write_file(f"{storage.root}/a/file", b"hello", storage.root)
    assert (tmp_path / "store" / "a" / "file").read_bytes() == b"hello"
    assert storage.read_file(storage.root, ref) == b"hello"
    storage.fs.mv(f"{storage.root}/a/file", f"{storage.root}/a/moved")
    storage.delete(f"{storage.root}/a", recursive=True)
    assert not (tmp_path / "store" / "a").exists()


@pytest.mark.parametrize(("kind", "code"), [("EIO", errno.EIO), ("ENOSPC", errno.ENOSPC)])
def test_write_errors_fail_opening_and_writing(
    tmp_path: Path, switch: StorageFaultSwitch, kind: str, code: int
) -> None:
    fs = fsspec.filesystem("faulty")
    stream = fs.open(f"{tmp_path}/open-before", "wb")
    _flip(switch, StorageFaults(write=kind))  # type: ignore[arg-type]
    with pytest.raises(OSError, match="injected by faulty://") as opening:
        fs.open(f"{tmp_path}/new", "wb")
    assert opening.value.errno == code
    with pytest.raises(OSError, match="injected by faulty://") as writing:
        stream.write(b"x")
    assert writing.value.errno == code
    assert fs.cat_file(f"{tmp_path}/open-before") == b"", "reads still work"
    _flip(switch, StorageFaults())
    stream.write(b"x")
    stream.close()
    assert (tmp_path / "open-before").read_bytes() == b"x"


def test_rename_and_delete_errors(tmp_path: Path, switch: StorageFaultSwitch) -> None:
    fs = fsspec.filesystem("faulty")
    (tmp_path / "a").write_bytes(b"a")
    _flip(switch, StorageFaults(rename="EIO", delete="EIO"))
    with pytest.raises(OSError, match="on rename"):
        fs.mv(f"{tmp_path}/a", f"{tmp_path}/b")
    with pytest.raises(OSError, match="on delete"):
        fs.rm(f"{tmp_path}/a")
    with pytest.raises(OSError, match="on delete"):
        fs.rm_file(f"{tmp_path}/a")
    assert (tmp_path / "a").exists()
    _flip(switch, StorageFaults())
    fs.mv(f"{tmp_path}/a", f"{tmp_path}/b")
    fs.rm(f"{tmp_path}/b")
    assert not (tmp_path / "b").exists()


def test_faults_apply_only_under_their_path(tmp_path: Path, switch: StorageFaultSwitch) -> None:
    fs = fsspec.filesystem("faulty")
    (tmp_path / "broken").mkdir()
    _flip(switch, StorageFaults(write="EIO", under=f"{tmp_path}/broken"))
    fs.pipe_file(f"{tmp_path}/fine", b"ok")
    with pytest.raises(OSError, match="injected by faulty://"):
        fs.pipe_file(f"{tmp_path}/broken/file", b"no")


def test_slow_uploads_take_longer_per_write(tmp_path: Path, switch: StorageFaultSwitch) -> None:
    storage = CheckpointStorage(f"faulty://{tmp_path}")
    _flip(switch, StorageFaults(slow_write_s=0.2))
    started = time.monotonic()
    storage.write_file(f"{storage.root}/slow", iter([b"a", b"b", b"c"]), storage.root)
    assert time.monotonic() - started >= 0.2 * 4, "the opening and each of 3 writes waited"
