"""The etcd process `lockgate run` embeds (and the tests start): how soon it serves."""

from __future__ import annotations

import time
from pathlib import Path

from lockgate.runtime.coordination.etcd_server import EtcdServer


def test_an_etcd_restarted_on_its_data_serves_within_a_second(tmp_path: Path) -> None:
    """Failed before: a one-member etcd started on the data of an earlier run waited
    out etcd's default election timeout (1 s, randomised up to 2 s) before it elected
    itself and served — most of a rerun's start-up to its first record. The best of
    three restarts, so that a busy machine does not decide it."""
    server = EtcdServer(tmp_path / "etcd")
    server.start()
    took = []
    try:
        for _ in range(3):
            server.stop()
            started = time.monotonic()
            server.start()
            took.append(time.monotonic() - started)
    finally:
        server.stop()
    assert min(took) < 1.0, f"restarts took {', '.join(f'{s:.2f} s' for s in took)}"
