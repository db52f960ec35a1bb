"""The etcd wrapper: failover, clear errors, validation, TLS — against real etcd."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from lockgate.runtime.coordination.etcd import (
    Etcd,
    EtcdConfig,
    EtcdConfigError,
    EtcdUnavailableError,
)
from lockgate.runtime.coordination.etcd_server import EtcdServer, free_port


async def test_fails_over_past_a_dead_endpoint(etcd_server: EtcdServer) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with Etcd(EtcdConfig((dead, etcd_server.endpoint))) as etcd:
        await etcd.put(b"/lockgate-test/failover", b"ok")
        assert await etcd.get(b"/lockgate-test/failover") == b"ok"


async def test_unreachable_etcd_names_every_endpoint_tried() -> None:
    endpoints = tuple(f"http://127.0.0.1:{free_port()}" for _ in range(2))
    with pytest.raises(EtcdUnavailableError) as error:
        async with Etcd(EtcdConfig(endpoints, retries=2, backoff_s=0.01)):
            pass
    for endpoint in endpoints:
        assert endpoint in str(error.value)


async def test_operations_retry_then_name_the_endpoints(tmp_path: Path) -> None:
    server = EtcdServer(tmp_path / "etcd")
    server.start()
    etcd = Etcd(EtcdConfig((server.endpoint,), retries=3, backoff_s=0.01))
    await etcd.connect()
    server.stop()
    try:
        with pytest.raises(
            EtcdUnavailableError, match=rf"put failed after 3 attempts against {server.endpoint}"
        ):
            await etcd.put(b"/k", b"v")
    finally:
        await etcd.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"endpoints": ()}, "at least one"),
        ({"endpoints": ("127.0.0.1:2379",)}, "http://host:port"),
        ({"endpoints": ("ftp://h:1",)}, "ftp://h:1"),
        ({"endpoints": ("http://h:1",), "username": "u"}, "username and password"),
        ({"endpoints": ("http://h:1",), "cert_file": "c"}, "cert_file and key_file"),
    ],
)
def test_invalid_configuration_says_what_is_wrong(kwargs, message) -> None:
    with pytest.raises(EtcdConfigError, match=message):
        EtcdConfig(**kwargs)


def test_comma_separated_endpoints() -> None:
    config = EtcdConfig.from_url("http://a:1, http://b:2")
    assert config.endpoints == ("http://a:1", "http://b:2")


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _certificates(directory: Path) -> dict[str, Path]:
    files = {
        name: directory / f"{name}.pem"
        for name in ("ca", "ca-key", "server", "server-key", "client", "client-key")
    }
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        str(files["ca-key"]),
        "-out",
        str(files["ca"]),
    )
    for role, extra in (
        ("server", "subjectAltName=IP:127.0.0.1"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        csr = directory / f"{role}.csr"
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={role}",
            "-keyout",
            str(files[f"{role}-key"]),
            "-out",
            str(csr),
        )
        ext = directory / f"{role}.ext"
        ext.write_text(extra + "\n")
        _openssl(
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(files["ca"]),
            "-CAkey",
            str(files["ca-key"]),
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            str(ext),
            "-out",
            str(files[role]),
        )
    return files


async def test_tls_with_client_certificates(tmp_path: Path) -> None:
    files = _certificates(tmp_path)
    server = EtcdServer(
        tmp_path / "etcd",
        tls=(str(files["ca"]), str(files["server"]), str(files["server-key"])),
    )
    server.start()
    try:
        config = EtcdConfig(
            (server.endpoint,),
            ca_file=str(files["ca"]),
            cert_file=str(files["client"]),
            key_file=str(files["client-key"]),
        )
        async with Etcd(config) as etcd:
            await etcd.put(b"/tls", b"secret")
            assert await etcd.get(b"/tls") == b"secret"
        untrusted = EtcdConfig((server.endpoint,), ca_file=str(files["ca"]), retries=1)
        with pytest.raises(EtcdUnavailableError, match=server.endpoint):
            async with Etcd(untrusted):
                pass
    finally:
        server.stop()
