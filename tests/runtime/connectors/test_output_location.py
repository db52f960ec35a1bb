"""A FileSink's output location: made when missing, refused with its URL when it
cannot be written, on the driver (`validate`) and by each writer as it starts."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from lockgate.runtime import FileSink, JobIdentity, read_committed

from tests.runtime.connectors.subtasks import JOB, open_writer


def _takes_files(directory: Path) -> bool:
    probe = directory / "lockgate-probe"
    try:
        probe.write_bytes(b"")
    except OSError:
        return False
    probe.unlink()
    return True


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory that takes no files: mode 0o500, or, where that does not stop
    this user (root), /sys, which the kernel keeps read-only."""
    directory = tmp_path / "read-only"
    directory.mkdir()
    directory.chmod(0o500)
    try:
        if not _takes_files(directory):
            yield directory
            return
        if not _takes_files(Path("/sys")):
            yield Path("/sys")
            return
        pytest.fail("found no read-only directory: mode 0o500 does not stop this user, and /sys takes files")
    finally:
        directory.chmod(0o700)


def _refused(url: str, cause: str) -> str:
    return rf"{re.escape(url)}: .*{cause}"


def test_a_missing_directory_is_made_with_its_missing_parents(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/a/b/out"
    FileSink(url).validate(JOB)
    assert (tmp_path / "a" / "b" / "out").is_dir()
    assert list((tmp_path / "a" / "b" / "out").iterdir()) == [], "the driver's probe file is gone"
    writer = open_writer(FileSink(f"file://{tmp_path}/c/out"))
    writer.write({"n": 1})
    writer.commit(writer.pre_commit(1))
    assert read_committed(f"file://{tmp_path}/c/out") == [{"n": 1}]


def test_a_read_only_directory_is_refused_before_a_record_is_written(read_only_dir: Path) -> None:
    url = f"file://{read_only_dir}"
    with pytest.raises(ValueError, match=_refused(url, "the output directory takes no files")):
        open_writer(FileSink(url))
    with pytest.raises(ValueError, match=_refused(url, "the output directory takes no files")):
        FileSink(url).validate(JOB)


def test_a_missing_directory_under_a_read_only_one_is_refused(read_only_dir: Path) -> None:
    url = f"file://{read_only_dir}/out"
    with pytest.raises(ValueError, match=_refused(url, "cannot make the output directory")):
        open_writer(FileSink(url))
    with pytest.raises(ValueError, match=_refused(url, "cannot make the output directory")):
        FileSink(url).validate(JOB)


def test_a_location_under_proc_is_refused() -> None:
    url = f"file:///proc/lockgate-out-{os.getpid()}"
    with pytest.raises(ValueError, match=_refused(url, "cannot make the output directory")):
        open_writer(FileSink(url))


def test_a_location_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    url = f"file://{tmp_path}/file/out"
    with pytest.raises(ValueError, match=_refused(url, "is a file, not a directory")):
        open_writer(FileSink(url))
    with pytest.raises(ValueError, match=_refused(url, f"{tmp_path}/file, above it, is a file")):
        FileSink(url).validate(JOB)


def test_a_location_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("not a directory")
    url = f"file://{tmp_path}/out"
    with pytest.raises(ValueError, match=_refused(url, "the output location is a file")):
        open_writer(FileSink(url))


@pytest.mark.parametrize("url", ["out", "file://out", "data/out"])
def test_a_relative_path_is_refused_when_the_sink_is_made(url: str) -> None:
    with pytest.raises(ValueError, match=_refused(url, "a relative path names a different directory")):
        FileSink(url)


def test_an_unknown_protocol_is_refused_when_the_sink_is_made() -> None:
    with pytest.raises(ValueError, match=_refused("nosuchfs://bucket/out", "unknown protocol 'nosuchfs'")):
        FileSink("nosuchfs://bucket/out")


def test_an_object_store_without_its_package_is_refused_when_the_sink_is_made() -> None:
    # gcsfs is no test dependency (s3fs is: the end-to-end tests use S3)
    assert importlib.util.find_spec("gcsfs") is None, "this test needs an object store not installed"
    with pytest.raises(
        ValueError, match=_refused("gs://bucket/out", "the file system for gs:// is not installed")
    ):
        FileSink("gs://bucket/out")


def test_names_longer_than_file_systems_take_are_refused(tmp_path: Path) -> None:
    long_job = JobIdentity("default", "j" * 250)
    url = f"file://{tmp_path}/out"
    with pytest.raises(ValueError, match="shorten the job id"):
        open_writer(FileSink(url), job=long_job)
    with pytest.raises(ValueError, match=_refused(url, "more than the 255 most file systems allow")):
        FileSink(url).validate(long_job)
