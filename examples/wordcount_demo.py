"""Demo: the word count job on Spark (local[3]) at parallelism 3, exactly once.

Writes a few thousand lines into four partitions, runs
`lockgate run examples.wordcount:build --bounded --parallelism 3` (Spark local
mode, an embedded etcd, a checkpoint every second), then checks the committed
output against a plain Counter: every word's counts 1..n, each exactly once.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from lockgate.runtime import read_committed

ROOT = Path(__file__).resolve().parent.parent
WORDS = ["state", "barrier", "checkpoint", "savepoint", "key", "group", "rescale", "spark", "stream"]


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="lockgate-demo-"))
    try:
        rng = random.Random(7)
        (work / "lines").mkdir()
        expected: Counter[str] = Counter()
        for partition in range(4):
            with open(work / "lines" / f"part-{partition}.jsonl", "w") as out:
                for _ in range(5000):
                    line = [rng.choice(WORDS) for _ in range(rng.randint(1, 10))]
                    expected.update(line)
                    out.write(json.dumps({"text": " ".join(line)}) + "\n")
        command = [
            str(Path(sys.executable).parent / "lockgate"),
            "run",
            "examples.wordcount:build",
            "--parallelism",
            "3",
            "--bounded",
            "--checkpoint-interval",
            "1",
            "--arg",
            f"input=file://{work}/lines",
            "--arg",
            f"output=file://{work}/out",
        ]
        print("$", " ".join(command[1:]), flush=True)
        # The run keeps its etcd and checkpoints under .lockgate/ in its directory.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        subprocess.run(command, cwd=work, env=env, check=True)
        output = read_committed(f"file://{work}/out")
        counts = Counter((r["word"], r["count"]) for r in output)
        reference = Counter((w, k) for w, n in expected.items() for k in range(1, n + 1))
        if counts != reference:
            extra, missing = sum((counts - reference).values()), sum((reference - counts).values())
            print(f"MISMATCH: {extra} extra records, {missing} missing")
            return 1
        top = ", ".join(f"{w} {n}" for w, n in expected.most_common(3))
        print(f"{len(output):,} committed records, each count exactly once (top words: {top}): OK")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
