"""What the operator reads from and writes to a job's etcd keys: the runtime's
contract (`lockgate.runtime.coordination`), nothing of its internals."""

from __future__ import annotations

from lockgate.runtime.autoscaling.status import AutoscalerStatus
from lockgate.runtime.clock import Clock
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.job_identity import JobIdentity, grant, revoke
from lockgate.runtime.coordination.job_requests import (
    await_rescale,
    await_savepoint,
    request_rescale,
    request_savepoint,
)
from lockgate.runtime.coordination.job_status import StatusReader
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import (
    CompletedCheckpoint,
    JobStatus,
    RescaleResult,
    SavepointResult,
    decode,
)


class JobEtcd:
    """One etcd connection for the operator's lifetime (observations run every few
    seconds per job: a connection each would be a gRPC handshake each)."""

    def __init__(self, config: EtcdConfig, clock: Clock | None = None) -> None:
        self._etcd = Etcd(config)  # connects on first use, fails over between endpoints
        self._status = StatusReader(self._etcd, clock=clock)

    async def close(self) -> None:
        await self._etcd.close()

    async def status(self, keys: JobKeys) -> JobStatus | None:
        """The job's status; None also for a `running` one whose beat stood still for
        its TTL, even while another etcd user keeps its lease alive."""
        return await self._status.read(keys)

    async def autoscaler(self, keys: JobKeys) -> AutoscalerStatus | None:
        """What the driver's autoscaler last published; None before it did."""
        data = await self._etcd.get(keys.autoscaler)
        return None if data is None else decode(AutoscalerStatus, data)

    async def latest_checkpoint(self, keys: JobKeys) -> CompletedCheckpoint | None:
        latest = await self._etcd.get(keys.latest)
        data = None if latest is None else await self._etcd.get(keys.completed_of(int(latest)))
        return None if data is None else decode(CompletedCheckpoint, data)

    async def snapshot_paths(self, keys: JobKeys) -> set[str]:
        """Where the job's completed snapshots in etcd are: what its next launch may restore."""
        completed = await self._etcd.get_prefix(keys.completed)
        return {decode(CompletedCheckpoint, data).path for _, data in completed}

    async def savepoint_result(self, keys: JobKeys, request_id: str) -> SavepointResult | None:
        """The final result of an earlier request, if it has one."""
        result = await self.savepoint_answer(keys, request_id)
        return None if result is None or result.status == "pending" else result

    async def savepoint_answer(self, keys: JobKeys, request_id: str) -> SavepointResult | None:
        """What the driver said of a request so far: pending (being taken), final, or nothing."""
        data = await self._etcd.get(keys.savepoint_result(request_id))
        return None if data is None else decode(SavepointResult, data)

    async def savepoint_requested(self, keys: JobKeys, request_id: str) -> bool:
        """Whether the request still waits to be served (it is withdrawn at its timeout)."""
        return await self._etcd.get(keys.savepoint_request(request_id)) is not None

    async def savepoint(
        self, keys: JobKeys, *, request_id: str, stop: bool, directory: str | None, timeout_s: float
    ) -> SavepointResult:
        """Ask for a savepoint and wait for its result; a repeated `request_id` (an
        operator restarted mid-upgrade) waits for the first request's result."""
        etcd = self._etcd
        if not await self.savepoint_requested(keys, request_id):
            await request_savepoint(
                etcd, keys, stop=stop, directory=directory, request_id=request_id, expires_in_s=timeout_s
            )
        try:
            result = await await_savepoint(etcd, keys, request_id, timeout_s)
        except TimeoutError:
            # Withdrawn, so that the next driver does not serve it (and stop) when it starts.
            await etcd.delete(keys.savepoint_request(request_id))
            raise
        await etcd.delete(keys.savepoint_request(request_id))  # read: a stopping driver need not wait
        return result

    async def rescale(
        self,
        keys: JobKeys,
        parallelism: int,
        *,
        generation: int,
        request_id: str,
        timeout_s: float,
        taken_up_s: float,
    ) -> RescaleResult:
        """Ask the running driver to rescale in place and wait for its final answer
        (`TimeoutError` if it did not take the request up within `taken_up_s`); a
        repeated `request_id` (an operator restarted mid-rescale) waits for the first's."""
        etcd = self._etcd
        if await etcd.get(keys.rescale_request(request_id)) is None:
            await request_rescale(
                etcd, keys, parallelism, generation, request_id=request_id, expires_in_s=timeout_s
            )
        try:
            return await await_rescale(etcd, keys, request_id, timeout_s, taken_up_s=taken_up_s)
        except TimeoutError:
            # Withdrawn: the fallback replaces the driver, whose successor must not serve it.
            await etcd.delete(keys.rescale_request(request_id))
            raise

    async def grant_identity(self, keys: JobKeys, password: str) -> None:
        """The job's own etcd user, with `password`, reaching only the job's keys."""
        await grant(self._etcd, JobIdentity(keys), password)

    async def revoke_identity(self, keys: JobKeys) -> None:
        await revoke(self._etcd, JobIdentity(keys))

    async def forget(self, keys: JobKeys) -> None:
        """Remove every key of the job (its checkpoints' files are not touched)."""
        await self._etcd.delete_prefix(keys.root)
