"""A savepoint `lockgate.state` bootstrapped, signed with the job's key (the Secret
the operator made for it), named by a new StreamingJob's `initialSavepointPath`:
the operator's logic on a real etcd and an in-memory Kubernetes API, the driver
pod run by the real driver (`driver_in_process.py`), which restores it and
continues exactly; the same savepoint with a state file altered after it was
signed is refused, the job Failed with the file named in its status."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from lockgate.operator import reconcile
from lockgate.operator.driver_pod import SNAPSHOT_KEY_FILE
from lockgate.runtime import ValueStateDescriptor, read_committed
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.snapshot.snapshot_key import SnapshotKey
from lockgate.state import KeyContext, SavepointWriter, open_snapshot

from tests.operator.cluster_helpers import NAMESPACE, SPEC
from tests.operator.driver_in_process import run_driver_pod
from tests.operator.job_under_test import JobUnderTest

COUNT, KEYS = 60, 5
START = {key: 10_000 * (key + 1) for key in range(KEYS)}  # what the bootstrap sets
TOTAL = ValueStateDescriptor("total", default=0)  # examples.sums' state


def _spec(tmp_path: Path, initial: str) -> dict[str, Any]:
    # One source partition: each key's records reach its sum in the order of n.
    args = {"count": str(COUNT), "keys": str(KEYS), "partitions": "1", "output": f"file://{tmp_path}/out"}
    return {
        **SPEC,
        "job": {"entrypoint": "examples.sums:build", "args": args},
        "initialSavepointPath": initial,
    }


def _jobs_key(under_test: JobUnderTest) -> SnapshotKey:
    """The job's snapshot key, from the Secret the operator created with the job."""
    secret = under_test.kube.objects["Secret", NAMESPACE, f"{under_test.name}-lockgate-snapshot-key"]
    return SnapshotKey(bytes.fromhex(secret["stringData"][SNAPSHOT_KEY_FILE]), "the job's Secret")


def _bootstrap(url: str, key: SnapshotKey) -> None:
    """The sums' state as a table gives it, in the job's key groups (spec.maxParallelism)."""

    def set_total(k: Any, records: list[dict[str, int]], ctx: KeyContext) -> None:
        ctx.state(TOTAL).update(records[0]["total"])

    writer = SavepointWriter.new(max_parallelism=SPEC["maxParallelism"], job_id="sums-from-a-table")
    table = [{"key": k, "total": total} for k, total in START.items()]
    writer.bootstrap("sum", table, lambda r: r["key"], set_total, parallelism=2)
    writer.write(url, key)


async def _created_with_bootstrapped_savepoint(under_test: JobUnderTest, tmp_path: Path) -> tuple[str, str]:
    """The job created from a savepoint bootstrapped with its key (written once the
    operator made the key, before the driver it launched runs); the savepoint's URL
    and the driver pod's name."""
    initial = f"file://{tmp_path}/checkpoints/{NAMESPACE}/imports/from-a-table"
    await reconcile.on_create(await under_test.job(_spec(tmp_path, initial)))
    _bootstrap(initial, _jobs_key(under_test))
    assert open_snapshot(initial, _jobs_key(under_test)).operator("sum").parallelism == 2
    return initial, f"{under_test.name}-driver-1"


async def test_a_new_job_restores_a_bootstrapped_savepoint_and_continues_exactly(
    under_test: JobUnderTest, tmp_path: Path
) -> None:
    initial, pod = await _created_with_bootstrapped_savepoint(under_test, tmp_path)
    assert await run_driver_pod(under_test.kube, pod, tmp_path / "pods", ThreadStage()) == 0
    await reconcile.observe(await under_test.job(_spec(tmp_path, initial)))
    assert under_test.status()["phase"] == "Finished", under_test.status().get("message")

    output = read_committed(f"file://{tmp_path}/out")
    assert Counter(r["n"] for r in output) == Counter(range(COUNT)), "every record once"
    for key in range(KEYS):
        running, expected = START[key], []
        for n in range(key, COUNT, KEYS):
            running += n
            expected.append(running)
        assert sorted(r["sum"] for r in output if r["key"] == key) == expected, key


async def test_a_bootstrapped_savepoint_altered_after_it_was_signed_is_refused(
    under_test: JobUnderTest, tmp_path: Path
) -> None:
    initial, pod = await _created_with_bootstrapped_savepoint(under_test, tmp_path)
    keyed = Path(initial.removeprefix("file://")) / "sum" / "0" / "keyed"
    data = bytearray(keyed.read_bytes())
    data[-20] ^= 0xFF  # inside a key group's section, after the index
    keyed.write_bytes(bytes(data))

    assert await run_driver_pod(under_test.kube, pod, tmp_path / "pods", ThreadStage()) != 0
    await reconcile.observe(await under_test.job(_spec(tmp_path, initial)))
    status = under_test.status()
    assert status["phase"] == "Failed"
    assert status["failure"]["class"] == "restore", status["failure"]
    assert "sum/0/keyed" in status["failure"]["message"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "RestoreFailure"
    assert not Path(tmp_path / "out").exists() or read_committed(f"file://{tmp_path}/out") == [], (
        "nothing committed from altered state"
    )
