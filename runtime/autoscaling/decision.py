"""The autoscaler's decision: the parallelism a job's load needs, and when to move to it.

Sizing (after FLIP-271 and the DS2 paper, for one parallelism per job): over the
metrics window, each chain's true processing rate is the records it took in per
second of busy time (what one subtask does when it never waits). The sources'
input rate is what they read plus how fast their backlog grew; the target rate
adds the backlog — and what arrives during a rescale's pause — spread over the
catch-up duration. Each chain must take its share of the target rate (its
records in per record read) at no more than the target utilization — in its
busiest subtask: a keyed chain's subtasks count their records per key group, and
a parallelism whose split of the key groups gives one subtask more than its
share (few or hot keys: at 5 subtasks of 32 key groups, 101 keys give one of
them 29 % of the records, not 20 %) is passed over for the next that keeps the
busiest within the target, as DS2's mean subtask would not; the job
needs the largest parallelism any chain needs, clamped to [min, max] and to the
key groups (maxParallelism), then rounded up to one that spreads the key groups
— and a Kafka source's partitions — evenly, when such a value is near:
at most a quarter more subtasks (at least one more).

Timing: samples from the stabilization interval after a rescale (or the start)
are not used — restoring and catching up the pause skew them — and a decision
needs a full window of samples after it. A scale-up acts at once, unless the
input is still rising: while the window's second half takes in a quarter more
than the whole window (a load step the window has not filled yet), it waits —
a window at most — so that it sizes for the new load in one step instead of a
step per window. A scale-up is sized by the second half's input rate where that
is higher (a scale-down never is: it is noisier). A scale-down
is considered only while the running parallelism is used less than
`scale_down_utilization` (0.4: between it and the target the job holds, as
Flink's utilization boundary does), and waits until every recommendation for
`scale_down_delay_s` of complete metrics was lower, then goes to the highest of
the last delay's, once the current one is that high (so a load drop takes one
step down, not two; a load still falling after twice the delay goes down to that
highest anyway): noise around a boundary raises a job once, never back and forth.
Incomplete metrics take no decision and restart that wait; the reason says what
was missing. A source that cannot tell its backlog is sized by its read rate and
busy time alone: enough to scale up (a lower bound of the need), not to scale
down unless the sources idle (then they read all that arrives).

A recommendation no higher than the running parallelism is also sized by the
true rates measured at each lower parallelism the job ran at (`ScalingState.rates`,
kept across launches): subtasks that share cores each do less as more run, so the
running parallelism's rates undersell what fewer would do (`_sized_by_fewer`).

`decide` is pure: it takes the series, the policy and the state the previous
decision returned, and returns the next decision with its reason, the window's
measurements it used and the next state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from lockgate.runtime.autoscaling.series import (
    ChainRates,
    IncompleteMetricsError,
    LoadSample,
    WindowLoad,
    measure,
)

RISING = 1.25
"""Input over the window's second half at least this many times the whole
window's: the load is still rising, and a scale-up waits for the window to hold it."""

NEAR_FRACTION = 0.25
"""How far above the needed parallelism an even split may lie: a quarter more
subtasks, and at least one more."""

SOURCES_IDLE = 0.05
"""A source chain idle at least this fraction of the time reads everything that
arrives: its read rate is its input rate, and its backlog is not needed."""

Action = Literal["scale-up", "scale-down", "hold", "not-taken"]


@dataclass(frozen=True)
class ScalingPolicy:
    """The autoscaler's settings (times in seconds)."""

    max_parallelism: int
    """The most subtasks the autoscaler may run (spec.autoscaler.maxReplicas)."""
    key_groups: int = 128
    """The job's maxParallelism: the key groups its keyed state is split into."""
    min_parallelism: int = 1
    kafka_partitions: int | None = None
    """The partition count of the job's Kafka source, if it reads one."""
    target_utilization: float = 0.7
    scale_down_utilization: float = 0.4
    """A scale-down is considered only while the running parallelism is used less
    than this: between it and the target, a rescale would save too little to pay
    for its pause."""
    catch_up_s: float = 300.0
    window_s: float = 60.0
    stabilization_s: float = 30.0
    scale_down_delay_s: float = 600.0
    restart_s: float = 0.0
    """A rescale's expected pause: what arrives meanwhile joins the backlog."""

    def __post_init__(self) -> None:
        checks = [
            ("min_parallelism", self.min_parallelism, self.min_parallelism >= 1, "at least 1"),
            (
                "max_parallelism",
                self.max_parallelism,
                self.max_parallelism >= self.min_parallelism,
                f"at least min_parallelism ({self.min_parallelism})",
            ),
            (
                "key_groups",
                self.key_groups,
                self.key_groups >= self.min_parallelism,
                f"at least min_parallelism ({self.min_parallelism})",
            ),
            (
                "kafka_partitions",
                self.kafka_partitions,
                self.kafka_partitions is None or self.kafka_partitions >= 1,
                "at least 1, or None",
            ),
            (
                "target_utilization",
                self.target_utilization,
                0 < self.target_utilization <= 1,
                "more than 0 and at most 1",
            ),
            (
                "scale_down_utilization",
                self.scale_down_utilization,
                0 <= self.scale_down_utilization < self.target_utilization,
                f"at least 0 and less than target_utilization ({self.target_utilization})",
            ),
            ("catch_up_s", self.catch_up_s, self.catch_up_s > 0, "more than 0"),
            ("window_s", self.window_s, self.window_s > 0, "more than 0"),
            ("stabilization_s", self.stabilization_s, self.stabilization_s >= 0, "at least 0"),
            ("scale_down_delay_s", self.scale_down_delay_s, self.scale_down_delay_s >= 0, "at least 0"),
            ("restart_s", self.restart_s, self.restart_s >= 0, "at least 0"),
        ]
        for name, value, ok, wanted in checks:
            if not ok:
                raise ValueError(f"ScalingPolicy {name} must be {wanted}, got {value!r}")


@dataclass(frozen=True)
class ScalingState:
    """What a decision hands to the next: the running parallelism, since when,
    and a scale-down under way: since when every recommendation was lower, and
    the highest of the last `scale_down_delay_s` (as (time, recommendation),
    each lower than the one before: the later of two is kept when it is higher)."""

    parallelism: int
    since_s: float
    lower_since_s: float | None = None
    recent: tuple[tuple[float, int], ...] = ()
    rising_since_s: float | None = None
    """Since when a scale-up has waited for a rising input to fill the window."""
    rates: tuple[tuple[int, tuple[tuple[str, float], ...]], ...] = ()
    """Per parallelism the job ran at, each chain's true rate as the last window
    measured there (ascending by parallelism): what a scale-down is sized by."""


@dataclass(frozen=True)
class Sizing:
    """How the recommendation was reached: the inputs it used."""

    load: WindowLoad
    target_rate: float
    """Records per second the sources must read: input rate plus catching up."""
    needed: tuple[tuple[str, int], ...]
    """Per chain, the parallelism that keeps it under the target utilization."""
    utilization: float
    """The busiest chain's share of its capacity at the running parallelism that
    the target rate would take."""
    busy_time_alone: bool
    """The backlog was unknown: sized by busy time and the read rate only."""
    recent: bool = False
    """Sized by the input rate of the window's second half: a load still rising."""
    rates_of: int | None = None
    """Sized by the true rates measured at this lower parallelism (None: the window's)."""
    demand: tuple[tuple[str, float], ...] = ()
    """Per chain with a true rate, the subtasks its share of the target rate needs at
    the target utilization if its records were spread evenly over them."""

    def fits(self, parallelism: int) -> bool:
        """Whether at `parallelism` the busiest subtask of every chain — by its key
        groups' counts, where known — stays within the target utilization."""
        chains = {c.vertex: c for c in self.load.chains}
        return all(even * chains[v].busiest_share(parallelism) <= 1 + 1e-9 for v, even in self.demand)

    @property
    def input_rate(self) -> float:
        """The input rate the target rate was sized for."""
        return _input_rate(self.load, self.recent)


@dataclass(frozen=True)
class Decision:
    """One decision: scale up or down to `parallelism`, hold, or none taken
    (`not-taken`: the metrics could not support one), and why."""

    at_s: float
    action: Action
    parallelism: int
    """The parallelism to run at (the running one unless scaling)."""
    reason: str
    state: ScalingState
    """What the next decision starts from."""
    recommended: int | None = None
    sizing: Sizing | None = None


def decide(
    series: Sequence[LoadSample], policy: ScalingPolicy, state: ScalingState, now_s: float
) -> Decision:
    """The decision at `now_s` on the samples of `series` up to then."""
    running = state.parallelism
    try:
        load = measure(
            series,
            parallelism=running,
            since_s=state.since_s + policy.stabilization_s,
            window_s=policy.window_s,
            now_s=now_s,
        )
        sizing = size(load, policy, running)
    except IncompleteMetricsError as missing:
        return _not_taken(now_s, state, f"metrics incomplete: {missing}")
    state = _remember_rates(state, running, load)
    recommended = recommend(sizing, policy, running)
    rising_since = _rising_since(now_s, state, load)
    if recommended > running and rising_since is not None and now_s - rising_since < policy.window_s:
        reason = (
            f"hold at {running}: {recommended} would do, but the input is still rising "
            f"({load.recent_input_rate:.4g}/s over the window's second half, {load.input_rate:.4g}/s "
            f"over the whole), waited {_s(now_s - rising_since)} s of at most {policy.window_s:g} s; "
            f"{_why(sizing)}"
        )
        held = replace(state, lower_since_s=None, recent=(), rising_since_s=rising_since)
        return Decision(now_s, "hold", running, reason, held, recommended, sizing)
    if recommended > running and (load.recent_input_rate or 0.0) > load.input_rate:
        sizing = size(load, policy, running, recent=True)
        recommended = max(recommended, recommend(sizing, policy, running))
    state = replace(state, rising_since_s=None)
    if recommended > running:
        return Decision(
            now_s,
            "scale-up",
            recommended,
            f"scale up {running} -> {recommended}: {_why(sizing)}",
            ScalingState(recommended, now_s, rates=state.rates),
            recommended,
            sizing,
        )
    if recommended <= running:
        sizing, recommended = _sized_by_fewer(policy, state, running, sizing, recommended)
    if recommended < running and sizing.busy_time_alone and load.sources_idle < SOURCES_IDLE:
        return _not_taken(
            now_s,
            state,
            f"source subtasks {', '.join(load.unknown_backlog)} cannot tell their backlog and the sources "
            f"are not idle (idle {load.sources_idle:.0%}): input may be waiting, so no scale-down",
            recommended,
            sizing,
        )
    if recommended == running or sizing.utilization >= policy.scale_down_utilization:
        held = replace(state, lower_since_s=None, recent=())
        return Decision(
            now_s, "hold", running, f"hold at {running}: {_why(sizing)}", held, recommended, sizing
        )
    return _lower(now_s, policy, state, recommended, sizing)


def _remember_rates(state: ScalingState, running: int, load: WindowLoad) -> ScalingState:
    """The state with each chain's true rate of this window as the one at `running`."""
    measured = tuple((c.vertex, c.true_rate) for c in load.chains if c.true_rate is not None)
    if not measured:
        return state
    others = [(p, rates) for p, rates in state.rates if p != running]
    return replace(state, rates=tuple(sorted([*others, (running, measured)])))


def _sized_by_fewer(
    policy: ScalingPolicy, state: ScalingState, running: int, sizing: Sizing, recommended: int
) -> tuple[Sizing, int]:
    """The sizing by a lower parallelism's measured rates, where that asks for no more
    subtasks than it ran: the subtasks share cores (threads of one process, or
    executors on shared nodes), and what one does per busy second falls as more run
    — DS2's true rate assumes independent processors. A rate measured at q is what
    a subtask does at q, and at least that at fewer; sized by it, p <= q subtasks
    are enough. The lowest such p, when lower than the running parallelism's rates
    give."""
    best = (sizing, recommended)
    for fewer, rates in state.rates:
        if fewer >= running:
            break
        by_fewer = size(sizing.load, policy, running, rates=dict(rates), rates_of=fewer)
        wanted = recommend(by_fewer, policy, running)
        if wanted <= fewer and wanted < best[1]:
            # Whether the running parallelism is used little enough to go down is its own measure.
            best = (replace(by_fewer, utilization=sizing.utilization), wanted)
    return best


def _rising_since(now_s: float, state: ScalingState, load: WindowLoad) -> float | None:
    """Since when the input has been rising (the window's second half taking in
    RISING times the whole's), or None when it is not."""
    recent = load.recent_input_rate
    if recent is None or recent < RISING * load.input_rate:
        return None
    return state.rising_since_s if state.rising_since_s is not None else now_s


def _lower(
    now_s: float, policy: ScalingPolicy, state: ScalingState, recommended: int, sizing: Sizing
) -> Decision:
    """Every recommendation lower than the running parallelism: scale down once
    they have been for the delay, to the highest of the last delay's — when the
    current one is that high (the load settled: no second step down behind the
    first), or after twice the delay (a load still falling)."""
    since = state.lower_since_s if state.lower_since_s is not None else now_s
    kept = [(at, r) for at, r in state.recent if at >= now_s - policy.scale_down_delay_s and r > recommended]
    recent = (*kept, (now_s, recommended))
    peak = recent[0][1]
    waited = now_s - since
    if waited >= policy.scale_down_delay_s and (
        peak == recommended or waited >= 2 * policy.scale_down_delay_s
    ):
        reason = (
            f"scale down {state.parallelism} -> {peak}: every recommendation for the last {_s(waited)} s was "
            f"lower, none above {peak} in the last {policy.scale_down_delay_s:g} s; {_why(sizing)}"
        )
        following = ScalingState(peak, now_s, rates=state.rates)
        return Decision(now_s, "scale-down", peak, reason, following, recommended, sizing)
    due = since + policy.scale_down_delay_s
    reason = (
        f"hold at {state.parallelism}: {peak} would do for {_s(waited)} s, scale-down in "
        f"{_s(max(0.0, due - now_s))} s; {_why(sizing)}"
    )
    pending = replace(state, lower_since_s=since, recent=recent)
    return Decision(now_s, "hold", state.parallelism, reason, pending, recommended, sizing)


def _not_taken(
    now_s: float,
    state: ScalingState,
    reason: str,
    recommended: int | None = None,
    sizing: Sizing | None = None,
) -> Decision:
    """No decision; a scale-down under way starts its wait again."""
    reset = replace(state, lower_since_s=None, recent=())
    return Decision(now_s, "not-taken", state.parallelism, reason, reset, recommended, sizing)


def size(
    load: WindowLoad,
    policy: ScalingPolicy,
    running: int,
    *,
    recent: bool = False,
    rates: Mapping[str, float] | None = None,
    rates_of: int | None = None,
) -> Sizing:
    """Per chain, the parallelism its share of the target rate needs; `recent`: for
    the input rate of the window's second half (a load still rising); `rates`: each
    chain's true rate as measured at parallelism `rates_of`, not in this window."""
    backlog = load.backlog or 0
    arriving = _input_rate(load, recent)
    target = arriving + (backlog + arriving * policy.restart_s) / policy.catch_up_s
    if load.read_rate <= 0 and backlog > 0:
        raise IncompleteMetricsError(
            f"the sources read nothing while {backlog} records wait: no processing rate to size by"
        )
    needed: list[tuple[str, int]] = []
    demand: list[tuple[str, float]] = []
    utilization = 0.0
    for chain in load.chains:
        true_rate = chain.true_rate if rates is None else rates.get(chain.vertex, chain.true_rate)
        if true_rate is None or load.read_rate <= 0:
            needed.append((chain.vertex, policy.min_parallelism))
            continue
        subtasks = target * _share(chain, load) / true_rate  # at full utilization, spread evenly
        even = subtasks / policy.target_utilization
        demand.append((chain.vertex, even))
        needed.append((chain.vertex, _needed_for_skew(chain, even, policy)))
        utilization = max(utilization, subtasks * chain.busiest_share(running))
    return Sizing(
        load,
        target,
        tuple(needed),
        utilization,
        bool(load.unknown_backlog),
        recent,
        rates_of,
        tuple(demand),
    )


def _needed_for_skew(chain: ChainRates, even: float, policy: ScalingPolicy) -> int:
    """The fewest subtasks whose busiest — by the chain's key-group counts — takes at
    most its target share (`even` subtasks' worth of records in all): as many as
    `even` when the counts are unknown or spread evenly. Where no parallelism up to
    the ceiling is enough (a key group hotter than one subtask can take), the one
    whose busiest subtask takes the least."""
    spread = max(1, math.ceil(even - 1e-9))
    ceiling = min(policy.max_parallelism, policy.key_groups)
    if chain.key_group_records is None or spread >= ceiling:
        return spread
    candidates = range(spread, ceiling + 1)
    for parallelism in candidates:
        if even * chain.busiest_share(parallelism) <= 1 + 1e-9:
            return parallelism
    return min(candidates, key=lambda p: (chain.busiest_share(p), p))


def _share(chain: ChainRates, load: WindowLoad) -> float:
    """The chain's records in per record the sources read: over the window, or since
    the launch started where that is more. While the buffers between a source and
    the chain fill — a load step — the sources read ahead of what the chain takes
    in, and the window's ratio undersells what will reach it (on tansu 0.67 in the
    window a step ended, where every record read reaches the chain)."""
    window = chain.records_per_s / load.read_rate
    if load.read_since_start <= 0:
        return window
    return max(window, chain.records_since_start / load.read_since_start)


def recommend(sizing: Sizing, policy: ScalingPolicy, running: int) -> int:
    """The largest parallelism a chain needs, clamped and evenly split where near;
    the running one when it is what is needed, or when the even split of less
    would come back to it (an uneven split is no reason to rescale)."""
    wanted = max((n for _, n in sizing.needed), default=policy.min_parallelism)
    ceiling = min(policy.max_parallelism, policy.key_groups)
    clamped = max(policy.min_parallelism, min(wanted, ceiling))
    if clamped == running:
        return running
    split = even_split(clamped, policy, ceiling, sizing.fits)
    return running if clamped < running <= split else split


def even_split(
    parallelism: int, policy: ScalingPolicy, ceiling: int, fits: Callable[[int], bool] = lambda p: True
) -> int:
    """The smallest parallelism from `parallelism` up to a quarter more (at least
    one more, at most `ceiling`) that divides both the key groups and the Kafka
    partitions, else the partitions alone (a source subtask reading one partition
    more than another is a skew of a whole partition), else the key groups;
    `parallelism` itself when none is near. Only those that `fits` (their busiest
    subtask within the target, by the key groups' counts) are taken: a split even
    in key groups can be uneven in records."""
    top = min(ceiling, parallelism + max(1, math.floor(parallelism * NEAR_FRACTION)))
    candidates = [p for p in range(parallelism, top + 1) if p == parallelism or fits(p)]
    key_groups = [p for p in candidates if policy.key_groups % p == 0]
    partitions = [p for p in candidates if policy.kafka_partitions and policy.kafka_partitions % p == 0]
    both = [p for p in key_groups if p in partitions or policy.kafka_partitions is None]
    return next(iter(both or partitions or key_groups), parallelism)


def _s(seconds: float) -> str:
    """A duration as a reason says it: the decision's times are the driver's wall
    clock, whose seconds since the epoch a reader cannot place."""
    return f"{round(seconds, 1):g}"


def _input_rate(load: WindowLoad, recent: bool) -> float:
    """What arrives per second: the window's rate, or (`recent`, for a scale-up) its
    second half's when that is higher."""
    return max(load.input_rate, load.recent_input_rate or 0.0) if recent else load.input_rate


def _why(sizing: Sizing) -> str:
    load = sizing.load
    backlog = "unknown backlog (busy time alone)" if sizing.busy_time_alone else f"backlog {load.backlog}"
    bottleneck, needed = max(sizing.needed, key=lambda pair: pair[1], default=("-", 0))
    arriving = _input_rate(load, sizing.recent)
    where = " over the window's second half" if arriving != load.input_rate else ""
    rates = "" if sizing.rates_of is None else f" at the rate a subtask did at {sizing.rates_of}"
    chain = next((c for c in load.chains if c.vertex == bottleneck), None)
    skew = ""
    if chain is not None and chain.key_group_records is not None and needed >= 1:
        share = chain.busiest_share(needed)
        if share > 1.05 / needed:  # the keys' spread, not rounding, set the need
            skew = f" (its busiest subtask would take {share:.0%} of its records, not {1 / needed:.0%})"
    return (
        f"input {arriving:.4g}/s{where}, {backlog}, target {sizing.target_rate:.4g}/s; "
        f"{bottleneck} needs {needed}{rates}{skew}"
    )
