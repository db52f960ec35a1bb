"""The autoscaler's loop, in the driver beside the job master (as Flink's adaptive
scheduler sizes its job): every sample interval it reads the running launch's
load counters from etcd (`samples.py`), takes a decision (`decision.decide`) and,
when that is a scale-up or a scale-down, writes a rescale request — the one
`lockgate rescale` writes — and waits for its answer. The driver's own
coordinator serves it, so a target the job cannot take is refused, and a rescale
whose checkpoint fails falls back, as for any other request. Each step publishes
the recommendation, the inputs it used and the last decisions under the job's
`autoscaler` key (`status.py`).

A new launch (a rescale, a restart) starts the series and the decision's state
afresh — its counters start from 0, and its first samples fall in the
stabilization interval, which `decide` leaves out — but for the true rates
measured at each parallelism, which a scale-down is sized by.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Protocol

from lockgate.runtime.autoscaling.decision import Decision, ScalingPolicy, ScalingState, decide
from lockgate.runtime.autoscaling.samples import load_sample, source_partitions
from lockgate.runtime.autoscaling.series import LoadSample
from lockgate.runtime.autoscaling.status import HISTORY_SIZE, AutoscalerStatus, Outcome, Rescaling
from lockgate.runtime.clock import WaitableClock
from lockgate.runtime.coordination.job_requests import await_rescale, request_rescale
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import KeyValueStore
from lockgate.runtime.coordination.records import decode, encode

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 1.0
"""As often as the tasks publish their counters."""

RESCALE_TIMEOUT_S = 300.0
"""How long the loop waits for the answer to its rescale request: the executors'
reservation, a checkpoint and the relaunch."""


class RunningJob(Protocol):
    """What the loop reads of the job master."""

    @property
    def running(self) -> tuple[int, int] | None:
        """(launch number, parallelism) of the launch whose tasks run now; None
        between launches."""
        ...


class Autoscaler:
    def __init__(
        self,
        store: KeyValueStore,
        keys: JobKeys,
        policy: ScalingPolicy,
        job: RunningJob,
        clock: WaitableClock,
        *,
        interval_s: float = SAMPLE_INTERVAL_S,
        rescale_timeout_s: float = RESCALE_TIMEOUT_S,
    ) -> None:
        self._store = store
        self._keys = keys
        self.policy = policy
        self._job = job
        self._clock = clock
        self._interval_s = interval_s
        self._rescale_timeout_s = rescale_timeout_s
        self._launch: int | None = None
        self._series: list[LoadSample] = []
        self._state: ScalingState | None = None
        self.history: tuple[Rescaling, ...] = ()
        self._sequence = 0
        self.last: Decision | None = None

    async def run(self) -> None:
        """Runs until cancelled (the job's end)."""
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:  # etcd out of reach a moment: the next step tries again
                log.warning("autoscaler step failed", exc_info=True)
            await self._clock.sleep(self._interval_s)

    async def step(self) -> Decision | None:
        """One sample and one decision; a decided rescale is requested and awaited.
        None while no launch runs."""
        running = self._job.running
        if running is None:
            return None
        launch, parallelism = running
        now_s = self._clock.now_ms() / 1000
        if self._state is None:
            await self._recall_history()
        if launch != self._launch or self._state is None:
            self._launch, self._series = launch, []
            self._state = ScalingState(parallelism, now_s, rates=self._rates())
        records = [value for _, value in await self._store.get_prefix(self._keys.progress_of_launch(launch))]
        sample = load_sample(records, parallelism)
        if sample is not None and (not self._series or sample.at_s > self._series[-1].at_s):
            self._series.append(sample)
            partitions = source_partitions(sample)
            if partitions is not None and partitions != self.policy.kafka_partitions:
                # The even split divides the source's partitions too (Kafka: the topic's).
                self.policy = dataclasses.replace(self.policy, kafka_partitions=partitions)
        self._trim(now_s)
        decision = decide(self._series, self.policy, self._state, now_s)
        self._state = decision.state
        self.last = decision
        await self._publish(decision, parallelism)
        if decision.action in ("scale-up", "scale-down"):
            log.info("autoscaler: %s", decision.reason)
            await self._rescale(decision, parallelism)
        elif decision.action == "not-taken":
            log.debug("autoscaler: %s", decision.reason)
        return decision

    def _rates(self) -> tuple[tuple[int, tuple[tuple[str, float], ...]], ...]:
        """The true rates measured at each parallelism so far: they outlive a launch."""
        return () if self._state is None else self._state.rates

    async def _recall_history(self) -> None:
        """An earlier driver's decisions (a driver the operator relaunched) stay in the
        history, and the sequence goes on from them."""
        data = await self._store.get(self._keys.autoscaler)
        if data is not None:
            try:
                self.history = decode(AutoscalerStatus, data).history
            except (ValueError, KeyError, TypeError):
                log.warning("the autoscaler record in etcd is unreadable; its history starts afresh")
            self._sequence = max((entry.sequence for entry in self.history), default=0)

    def _trim(self, now_s: float) -> None:
        """Keep what a window needs (a sample at least a window before the newest)."""
        keep_from = now_s - 2 * self.policy.window_s - 2 * self._interval_s
        self._series = [s for s in self._series if s.at_s >= keep_from]

    async def _rescale(self, decision: Decision, running: int) -> None:
        target = decision.parallelism
        outcome: Outcome
        detail: str | None
        try:
            request = await request_rescale(
                self._store, self._keys, target, expires_in_s=self._rescale_timeout_s
            )
            result = await await_rescale(self._store, self._keys, request, self._rescale_timeout_s)
        except TimeoutError:
            outcome, detail = "timed-out", f"no answer in {self._rescale_timeout_s:g} s"
        else:
            assert result.status != "pending", "await_rescale returns a final result"
            outcome, detail = result.status, result.reason
            stopped, relaunched = result.stopped_ms, result.relaunched_ms
            if outcome == "rescaled" and stopped is not None and relaunched is not None:
                pause_s = max(0.0, (relaunched - stopped) / 1000)
                detail = f"paused {pause_s:.3g} s"
                # What arrives during the next rescale's pause joins its backlog.
                self.policy = dataclasses.replace(self.policy, restart_s=pause_s)
        if outcome != "rescaled":
            log.warning("autoscaler: rescale %s -> %s %s: %s", running, target, outcome, detail)
            # The job runs on at `running`: its metrics must fill a window again first.
            self._state = ScalingState(running, self._clock.now_ms() / 1000, rates=self._rates())
        self._sequence += 1
        entry = Rescaling(
            self._sequence,
            round(decision.at_s * 1000),
            decision.action,
            running,
            target,
            decision.reason,
            outcome,
            detail,
        )
        self.history = (*self.history, entry)[-HISTORY_SIZE:]
        await self._publish(decision, running)

    async def _publish(self, decision: Decision, running: int) -> None:
        status = AutoscalerStatus.of(decision, self.policy, running, self._clock.now_ms(), self.history)
        await self._store.put(self._keys.autoscaler, encode(status))
