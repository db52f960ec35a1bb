"""Demo: click sessions by event time on Spark (local[2]) at parallelism 2.

Writes clicks of 200 users into four partitions, out of order by up to 2 s
within each, runs `lockgate run examples.sessions:build --bounded --parallelism 2`
and checks the committed sessions against ones computed in plain Python: every
session once, with its first and last click and how many clicks it had.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from lockgate.runtime import read_committed

ROOT = Path(__file__).resolve().parent.parent
GAP_MS = 30_000


def write_clicks(directory: Path, users: int, seed: int = 3) -> set[tuple[str, int, int, int]]:
    """Each user's sessions (clicks under 15 s apart, sessions over 90 s apart),
    the clicks spread over four partitions, each partition out of order by < 2 s."""
    rng = random.Random(seed)
    partitions: list[list[tuple[int, str]]] = [[] for _ in range(4)]
    sessions = set()
    for u in range(users):
        user, t = f"user-{u}", rng.randrange(0, 600_000)
        for _ in range(rng.randint(1, 3)):
            start, clicks = t, rng.randint(1, 20)
            for n in range(clicks):
                partitions[rng.randrange(4)].append((t, user))
                if n < clicks - 1:
                    t += rng.randrange(100, 15_000)
            sessions.add((user, start, t, clicks))
            t += rng.randrange(3 * GAP_MS, 6 * GAP_MS)
    directory.mkdir(parents=True)
    for index, clicks_of in enumerate(partitions):
        shuffled = sorted(clicks_of, key=lambda click: click[0] + rng.randrange(2_000))
        with open(directory / f"part-{index}.jsonl", "w") as out:
            out.writelines(json.dumps({"user": user, "ts": ts}) + "\n" for ts, user in shuffled)
    return sessions


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="lockgate-sessions-"))
    try:
        expected = write_clicks(work / "clicks", users=200)
        command = [
            str(Path(sys.executable).parent / "lockgate"),
            "run",
            "examples.sessions:build",
            "--parallelism",
            "2",
            "--bounded",
            "--checkpoint-interval",
            "1",
            "--arg",
            f"input=file://{work}/clicks",
            "--arg",
            f"output=file://{work}/out",
        ]
        print("$", " ".join(command[1:]), flush=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        subprocess.run(command, cwd=work, env=env, check=True)
        got = [(r["user"], r["start"], r["end"], r["clicks"]) for r in read_committed(f"file://{work}/out")]
        if len(got) != len(set(got)) or set(got) != expected:
            extra, missing, twice = (
                len(set(got) - expected),
                len(expected - set(got)),
                len(got) - len(set(got)),
            )
            print(f"MISMATCH: {extra} sessions not in the reference, {missing} missing, {twice} twice")
            return 1
        clicks = sum(s[3] for s in expected)
        print(f"{len(got):,} sessions from {clicks:,} out-of-order clicks, each exactly once: OK")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
