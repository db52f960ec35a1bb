"""Only the job's own snapshots are restored: `_metadata` signed with the job's
key, every file it names checked against its SHA-256. Someone who can write to
checkpoint storage but does not hold the key cannot make a task unpickle
anything: not by writing a savepoint of their own, not by swapping a file for one
whose CRC-32 matches, not by re-signing with another key."""

from __future__ import annotations

import os
import posixpath
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from lockgate.runtime import ValueStateDescriptor
from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.coordination.restore_point import Trust, verify
from lockgate.runtime.snapshot.metadata import (
    CheckpointMetadata,
    SnapshotNotSignedError,
    read_metadata,
    write_metadata,
)
from lockgate.runtime.snapshot.snapshot_key import SnapshotKey, key_for_local_job, read_key
from lockgate.runtime.snapshot.storage import CheckpointStorage, FileRef, SnapshotCorruptError
from lockgate.runtime.state.operator_state import OperatorStateStore

from tests.runtime.engine.test_network import Exploit
from tests.vertex_snapshots import LocalSubtask, restore_vertex, snapshot_vertex

REPO = Path(__file__).resolve().parents[3]
LOCKGATE = str(Path(sys.executable).parent / "lockgate")
KEY = SnapshotKey(b"k" * 32, "test key")
OTHER = SnapshotKey(b"o" * 32, "another job's key")


def _savepoint(storage: CheckpointStorage, directory: str, values: list[object]) -> CheckpointMetadata:
    """A snapshot whose operator state holds `values`, its `_metadata` unsigned."""
    operator = OperatorStateStore()
    operator.list_state("offsets").add_all(values)
    return snapshot_vertex(storage, directory, ("job", 1, "savepoint"), "v", [LocalSubtask(None, operator)])


def test_only_metadata_the_jobs_key_signed_is_restored(tmp_path: Path) -> None:
    storage = CheckpointStorage(f"file://{tmp_path}")
    directory = f"{tmp_path}/savepoint-1"
    meta = _savepoint(storage, directory, [1, 2, 3])
    url = f"file://{directory}"

    with pytest.raises(SnapshotNotSignedError, match="_metadata: is not signed") as unsigned:
        verify(url, Trust(KEY))
    assert "--import-unsigned-savepoint" in str(unsigned.value)
    verify(url, Trust(KEY, savepoint=url))  # vouched for: once, by name

    write_metadata(storage, directory, meta, KEY)
    assert verify(url, Trust(KEY)).metadata == meta
    with pytest.raises(SnapshotNotSignedError, match="not with this job's key"):
        verify(url, Trust(OTHER))

    signed = Path(directory, "_metadata").read_bytes()
    body, _, signature = signed.rstrip(b"\n").split(b"\n")
    altered = body.replace(b'"checkpoint_id": 1', b'"checkpoint_id": 7')
    new_crc = f"crc32:{zlib.crc32(altered):08x}".encode()
    Path(directory, "_metadata").write_bytes(b"\n".join([altered, new_crc, signature]) + b"\n")
    with pytest.raises(SnapshotNotSignedError, match="altered"):
        verify(url, Trust(KEY))


def test_a_file_swapped_for_one_with_the_same_size_and_crc_is_refused(tmp_path: Path) -> None:
    """The CRC-32 is no defence against someone who means it; the SHA-256 in the signed
    metadata is. (A CRC-32 collision is easy to make; here the ref is given the
    swapped file's CRC to stand for one.)"""
    storage = CheckpointStorage(f"file://{tmp_path}")
    directory = f"{tmp_path}/chk-1"
    meta = _savepoint(storage, directory, ["honest"])
    handle = meta.vertices["v"].subtasks[0].operator
    assert handle is not None
    ref = handle.file
    assert ref.sha256 is not None, "every file is recorded by its SHA-256"
    path = posixpath.join(directory, ref.path)
    honest = Path(path).read_bytes()
    swapped = honest.replace(b"honest", b"hacked")
    Path(path).write_bytes(swapped)
    forged = FileRef(ref.path, ref.size, zlib.crc32(swapped), ref.sha256)
    with pytest.raises(SnapshotCorruptError, match="SHA-256 mismatch: not the file this job wrote") as error:
        storage.read_file(directory, forged)
    assert path in str(error.value)
    with pytest.raises(SnapshotCorruptError, match="SHA-256 mismatch"):
        storage.verify_file(directory, forged)


def test_a_canonical_snapshot_read_by_key_group_checks_every_section_it_reads(tmp_path: Path) -> None:
    count = ValueStateDescriptor("count", default=0)
    backend = HeapKeyedStateBackend(8, range(8))
    state = backend.state(count)
    for key in range(100):
        backend.set_current_key(key)
        state.update(key)
    storage = CheckpointStorage(f"file://{tmp_path}")
    directory = f"{tmp_path}/savepoint-2"
    meta = snapshot_vertex(storage, directory, ("job", 2, "savepoint"), "v", [LocalSubtask(backend)])
    keyed = meta.vertices["v"].subtasks[0].keyed
    assert keyed is not None
    assert keyed.to_json()["index_sha256"], "the handle carries the index's SHA-256"
    (ref,) = keyed.files()
    path = Path(directory, ref.path)
    data = bytearray(path.read_bytes())
    data[len(b"LGKS\x01") + 3] ^= 0x01  # a bit of the first section
    path.write_bytes(bytes(data))
    half = HeapKeyedStateBackend(8, range(4))  # a rescaled subtask reads only its key groups
    with pytest.raises(SnapshotCorruptError, match="fails its"):
        restore_vertex(storage, directory, "v", [LocalSubtask(half)])


def test_a_local_jobs_key_is_made_on_its_first_run_for_this_user_only(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "default" / "job.key"
    new = key_for_local_job(path)
    assert not path.exists(), "written only when the run starts"
    new.persist()
    assert (path.stat().st_mode & 0o777) == 0o600
    assert read_key(path).secret == new.secret
    assert key_for_local_job(path).secret == new.secret, "the next run signs with the same key"
    path.write_text("not hex\n")
    with pytest.raises(ValueError, match="must hold 64 hex digits"):
        read_key(path)


def test_lockgate_run_refuses_a_crafted_savepoint_before_unpickling_a_byte(tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    storage = CheckpointStorage(f"file://{tmp_path}")
    _savepoint(storage, f"{tmp_path}/crafted", [Exploit(str(marker))])
    (tmp_path / "lines").mkdir()
    (tmp_path / "lines" / "part-0.jsonl").write_text('{"text": "a b"}\n')

    def run(*flags: str) -> subprocess.CompletedProcess[str]:
        arguments = ["run", "tests.jobs.configurable:word_count", "--bounded"]
        arguments += ["--arg", f"input=file://{tmp_path}/lines", "--arg", f"output=file://{tmp_path}/out"]
        return subprocess.run(
            [LOCKGATE, *arguments, "--from-savepoint", f"file://{tmp_path}/crafted", *flags],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )

    refused = run()
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert f"snapshot file {tmp_path}/crafted/_metadata: is not signed" in refused.stderr
    assert "--import-unsigned-savepoint" in refused.stderr
    assert not marker.exists(), "the crafted state was unpickled"
    assert not (tmp_path / ".lockgate").exists(), "refused before etcd or Spark started"
    assert read_metadata(storage, f"{tmp_path}/crafted").kind == "savepoint", (
        "the savepoint is left as it was"
    )
