"""Recorded series for the decision's tests: a job's metrics as its tasks would
report them, from a fluid model of a job of two chains — a source chain (5000
records per busy second per subtask) feeding a keyed chain (1000: the
bottleneck) — under an offered load that the test chooses, sampled every second.

The model: each second, what arrives joins the backlog; the job processes as much
of it as P keyed subtasks can (their busy time is what they processed over their
rate); the sources read what the job processes, idle when they keep up,
backpressured when they do not. A rescale restarts the subtasks (counters from
0) after a pause in which nothing is processed.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from lockgate.runtime.autoscaling.decision import Decision
from lockgate.runtime.autoscaling.series import LoadSample, SubtaskLoad

SOURCE_RATE = 5000.0
KEYED_RATE = 1000.0
KEPT_S = 400
"""Samples handed to a decision by default: more than the window and
stabilization of the tests' policy (Flink's defaults need 1200 s)."""

Decide = Callable[[list[LoadSample], float], Decision]


@dataclass
class Run:
    """What a simulated run recorded: per second the parallelism, the backlog and
    the offered load; and every decision that rescaled."""

    parallelism: list[int] = field(default_factory=list)
    backlog: list[float] = field(default_factory=list)
    rescales: list[Decision] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)

    def actions(self) -> list[str]:
        return [d.action for d in self.rescales]


@dataclass
class _Counters:
    records: float = 0.0
    source_busy: float = 0.0
    source_blocked: float = 0.0
    keyed_busy: float = 0.0


def simulate(
    offered: Callable[[float], float],
    decide: Decide,
    *,
    parallelism: int,
    until_s: int,
    decide_every_s: int = 5,
    pause_s: int = 5,
    noise: float = 0.0,
    seed: int = 1,
    backlog_known: bool = True,
    drop: Callable[[float, LoadSample], LoadSample] | None = None,
    kept_s: int = KEPT_S,
    keyed_rate: Callable[[int], float] = lambda parallelism: KEYED_RATE,
) -> Run:
    """Runs the model from 0 to `until_s`; `decide(samples, now)` is asked every
    `decide_every_s` and its rescales applied. `noise`: each second's arrivals
    vary by up to that fraction. `drop` may take metrics out of a sample.
    `keyed_rate`: what a keyed subtask processes per busy second at a parallelism
    (subtasks sharing cores do less each as more run)."""
    jitter = random.Random(seed)
    run = Run()
    samples: deque[LoadSample] = deque(maxlen=kept_s)
    counters = [_Counters() for _ in range(parallelism)]
    backlog = 0.0
    paused_until = 0
    for t in range(1, until_s + 1):
        arrived = offered(t) * (1 + noise * jitter.uniform(-1, 1))
        backlog += arrived
        rate = keyed_rate(parallelism)
        processed = 0.0 if t <= paused_until else min(backlog, parallelism * rate)
        backlog -= processed
        share = processed / parallelism
        for each in counters:
            each.records += share
            each.source_busy += share / SOURCE_RATE
            each.keyed_busy += share / rate
            if backlog > 0 and t > paused_until:  # the sources read as fast as the keyed chain takes
                each.source_blocked += 1.0 - share / SOURCE_RATE
        sample = _sample(t, parallelism, counters, backlog if backlog_known else None)
        samples.append(drop(t, sample) if drop is not None else sample)
        run.parallelism.append(parallelism)
        run.backlog.append(backlog)
        if t % decide_every_s:
            continue
        decision = decide(list(samples), float(t))
        run.decisions.append(decision)
        if decision.parallelism != parallelism:
            run.rescales.append(decision)
            parallelism = decision.parallelism
            counters = [_Counters() for _ in range(parallelism)]
            paused_until = t + pause_s
    return run


def _sample(t: int, parallelism: int, counters: list[_Counters], backlog: float | None) -> LoadSample:
    subtasks: list[SubtaskLoad] = []
    for index, each in enumerate(counters):
        share = None if backlog is None else round(backlog / parallelism)
        records = round(each.records)
        subtasks.append(
            SubtaskLoad("source", index, records, each.source_busy, each.source_blocked, True, share)
        )
        subtasks.append(SubtaskLoad("keyed", index, records, each.keyed_busy))
    return LoadSample(float(t), parallelism, tuple(subtasks))
