"""The soak's fault schedule: which faults each round injects, when, for how long,
all drawn from one seed before the soak starts (so a seed, or the saved schedule,
replays the same faults). Classes are spread evenly: each round takes the classes
injected least so far (ties broken by the seed), and within a class, its kinds
likewise."""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

KINDS: dict[str, tuple[str, ...]] = {
    "worker": ("worker-kill", "worker-pause"),
    "executor": ("executor-kill", "executor-pause", "executors-stall-relaunch"),
    "driver": ("driver-kill", "driver-pause", "driver-pause-takeover"),
    "etcd": ("etcd-kill", "etcd-pause", "etcd-restart"),
    "storage": (
        "storage-eio-write",
        "storage-eio-rename",
        "storage-eio-delete",
        "storage-slow",
        "storage-enospc",
    ),
    "partition": ("exchange-partition",),
    "checkpoint": ("checkpoint-flip", "checkpoint-truncate"),
    "kafka": ("kafka-late-writer",),
    "rescale": (
        "rescale-in-place",
        "rescale-driver-kill",
        "rescale-etcd-pause",
        "rescale-task-kill",
        "rescale-executor-kill",
    ),
}
CLASSES = tuple(KINDS)
CLASS_OF = {kind: cls for cls, kinds in KINDS.items() for kind in kinds}

# How long each kind holds (seconds, drawn uniformly): pauses of the driver and of
# etcd reach past the coordinator's 10 s lease.
HOLD_S: dict[str, tuple[float, float]] = {
    "worker-kill": (0, 0),
    "worker-pause": (1, 8),
    "executor-kill": (0, 0),
    "executor-pause": (2, 12),
    "executors-stall-relaunch": (8, 12),
    "driver-kill": (0, 0),
    "driver-pause": (12, 18),
    "driver-pause-takeover": (12, 15),  # at least; until the replacement took over
    "etcd-kill": (0.5, 5),
    "etcd-pause": (2, 14),
    "etcd-restart": (0, 0),
    "storage-eio-write": (1, 5),
    "storage-eio-rename": (1, 5),
    "storage-eio-delete": (1, 5),
    "storage-slow": (2, 8),
    "storage-enospc": (1, 5),
    "exchange-partition": (0, 0),  # until the runtime notices, or the partition bound
    "checkpoint-flip": (0, 0),
    "checkpoint-truncate": (0, 0),
    "kafka-late-writer": (12, 15),  # the driver's stall, at least; until the replacement committed
    "rescale-in-place": (0, 0),  # until the driver answers
}
# A fault at a step of an in-place rescale holds as the fault alone does.
HOLD_S |= {
    "rescale-driver-kill": HOLD_S["driver-kill"],
    "rescale-etcd-pause": HOLD_S["etcd-pause"],
    "rescale-task-kill": HOLD_S["worker-kill"],
    "rescale-executor-kill": HOLD_S["executor-kill"],
}


@dataclass(frozen=True)
class Fault:
    kind: str
    at_s: float  # from the start of the round's input
    hold_s: float
    seed: int  # the fault's own choices: which process, which file, which byte

    @property
    def cls(self) -> str:
        return CLASS_OF[self.kind]


@dataclass(frozen=True)
class Schedule:
    seed: int
    window_s: float
    rounds: tuple[tuple[Fault, ...], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "window_s": self.window_s,
            "rounds": [[asdict(f) for f in faults] for faults in self.rounds],
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> Schedule:
        rounds = tuple(tuple(Fault(**f) for f in faults) for faults in data["rounds"])
        return Schedule(int(data["seed"]), float(data["window_s"]), rounds)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1))

    @staticmethod
    def load(path: Path) -> Schedule:
        return Schedule.from_json(json.loads(path.read_text()))


def _least_used(rng: random.Random, options: tuple[str, ...], used: Counter[str], count: int) -> list[str]:
    order = sorted(options, key=lambda o: (used[o], rng.random()))
    return order[:count]


def plan(
    seed: int,
    rounds: int,
    faults_per_round: int,
    window_s: float,
    classes: tuple[str, ...] = CLASSES,
    kinds: tuple[str, ...] | None = None,
) -> Schedule:
    """`faults_per_round` faults of distinct classes in each round (fewer when fewer
    classes are allowed), at random times within the round's `window_s`. `kinds`
    narrows the kinds drawn (for replaying one kind)."""
    unknown = set(classes) - set(CLASSES)
    if unknown:
        raise ValueError(f"unknown fault classes {sorted(unknown)}; known: {', '.join(CLASSES)}")
    allowed = {c: tuple(k for k in KINDS[c] if kinds is None or k in kinds) for c in classes}
    usable = tuple(c for c in classes if allowed[c])
    if not usable:
        raise ValueError(f"no fault kind left in classes {classes} with kinds {kinds}")
    rng = random.Random(seed)
    used_classes: Counter[str] = Counter()
    used_kinds: Counter[str] = Counter()
    planned = []
    for _ in range(rounds):
        faults = []
        for cls in _least_used(rng, usable, used_classes, faults_per_round):
            kind = _least_used(rng, allowed[cls], used_kinds, 1)[0]
            used_classes[cls] += 1
            used_kinds[kind] += 1
            low, high = HOLD_S[kind]
            at = round(rng.uniform(0.5, window_s - 0.5), 2)
            faults.append(Fault(kind, at, round(rng.uniform(low, high), 2), rng.randrange(2**31)))
        planned.append(tuple(sorted(faults, key=lambda f: f.at_s)))
    return Schedule(seed, window_s, tuple(planned))
