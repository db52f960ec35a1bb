"""The S3 endpoint of the tests: each one is reached by what a test writes through
fsspec URLs, even after an earlier endpoint in the same process."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from tests.s3_server import s3_endpoint


def test_a_second_endpoint_in_one_process_is_the_one_written_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsspec caches a filesystem by its arguments; the endpoint comes from the
    environment. Without forgetting the cache, the second write went to the first
    (stopped) endpoint: the clean-clone run's e2e rescale failed so."""
    for number in (1, 2):
        with s3_endpoint(tmp_path / f"moto-{number}.log") as s3, monkeypatch.context() as env:
            for name, value in s3.environment.items():
                env.setenv(name, value)
            with fsspec.open(f"s3://{s3.bucket}/file", "wb") as out:
                out.write(b"written")
            assert s3.filesystem().cat(f"{s3.bucket}/file") == b"written"
