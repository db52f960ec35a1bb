"""A real S3 endpoint for the tests: moto's server, in its own virtualenv
(scripts/install.sh makes it: moto pins libraries older than Lockgate's own
need), on a free loopback port, with one bucket."""

from __future__ import annotations

import contextlib
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fsspec
from lockgate.runtime.coordination.etcd_server import free_port

MOTO_SERVER = Path(__file__).resolve().parent.parent / ".cache" / "moto" / "bin" / "moto_server"
STARTS_WITHIN_S = 60.0


@dataclass(frozen=True)
class S3Endpoint:
    url: str
    bucket: str
    access_key: str = "lockgate-test"
    secret_key: str = "lockgate-test-secret"  # moto accepts any; real S3 would check them

    @property
    def environment(self) -> dict[str, str]:
        """What a process needs to reach the bucket through s3fs (botocore reads these)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.url,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def filesystem(self) -> fsspec.AbstractFileSystem:
        return fsspec.filesystem(
            "s3",
            key=self.access_key,
            secret=self.secret_key,
            endpoint_url=self.url,
            skip_instance_cache=True,
        )


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True  # it answered
    except OSError:
        return False


@contextlib.contextmanager
def s3_endpoint(log: Path, bucket: str = "lockgate-e2e") -> Iterator[S3Endpoint]:
    if not MOTO_SERVER.exists():
        raise RuntimeError(f"{MOTO_SERVER} is missing: scripts/install.sh installs moto's S3 server there")
    port = free_port()
    with log.open("wb") as output:
        server = subprocess.Popen(
            [str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        endpoint = S3Endpoint(f"http://127.0.0.1:{port}", bucket)
        deadline = time.monotonic() + STARTS_WITHIN_S
        while not _answers(endpoint.url):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"moto's S3 server did not start: {log.read_text(errors='replace')[-2000:]}"
                )
            time.sleep(0.1)
        endpoint.filesystem().mkdir(bucket)
        # fsspec keeps one filesystem per set of arguments, and the endpoint comes from the
        # environment, not the arguments: a filesystem of an earlier endpoint would be reused.
        _forget_s3_filesystems()
        yield endpoint
    finally:
        _forget_s3_filesystems()
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _forget_s3_filesystems() -> None:
    fsspec.get_filesystem_class("s3").clear_instance_cache()
