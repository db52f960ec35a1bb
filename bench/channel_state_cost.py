"""What an unaligned checkpoint adds to a keyed subtask's work, per checkpoint.

With unaligned checkpoints on, a record and a frame take the same code as with
them off: the exchange sends, the channel queues and the gate reads alike.
What differs is per checkpoint — the barrier travels as an overtaking frame,
and once the subtask took the checkpoint it keeps what lay ahead of the
barriers as channel state: each frame read before its channel's barrier is
pickled again, the frames are grouped by key group (`group_frames`) and the
groups written as one file beside the subtask's snapshot
(`write_channel_state`). Without backpressure a channel holds a few frames at
most.

This times that work with the engine's own functions, for F frames of 512
keyed records (the exchange's `KeyedRecord` tuples of the engine benchmark's
keyed running sum) written to local checkpoint storage, the worst case being
every frame re-pickled: milliseconds per checkpoint, and what they are of a
checkpoint interval of 1 s and 5 s (the share of a subtask's time, so of its
throughput, that the work takes).

    .venv/bin/python bench/channel_state_cost.py [--frames 1 4 8 32] [--repeat 50]
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import tempfile
import time

from lockgate.runtime.engine.channel_state import group_frames, write_channel_state
from lockgate.runtime.key_serializer import serialize_key
from lockgate.runtime.keygroups import key_group_of_bytes
from lockgate.runtime.snapshot.storage import CheckpointStorage

RECORDS_PER_FRAME = 512
MAX_PARALLELISM = 128


def frame(first: int) -> list[tuple[str, bytes, int, dict[str, int | str]]]:
    """A frame of the keyed exchange: (key, key bytes, key group, record) per record."""
    records = []
    for n in range(first, first + RECORDS_PER_FRAME):
        key = f"key-{n % 100_000}"
        key_bytes = serialize_key(key)
        records.append((key, key_bytes, key_group_of_bytes(key_bytes, MAX_PARALLELISM), {"key": key, "n": n}))
    return records


def checkpoint_ms(frames: list[list[tuple[str, bytes, int, dict[str, int | str]]]], root: str) -> float:
    """One checkpoint's channel-state work: re-pickle, group, write."""
    storage = CheckpointStorage(f"file://{root}")
    started = time.perf_counter()
    pickled = [pickle.dumps(f, pickle.HIGHEST_PROTOCOL) for f in frames]
    groups = group_frames(pickled, lambda record: int(record[2]))
    write_channel_state(storage, f"{root}/chk/sum-0.channel", f"{root}/chk", groups)
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, nargs="+", default=[1, 4, 8, 32])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    print("| frames in flight | records | ms per checkpoint (median) | p90 | of a 1 s interval | of 5 s |")
    print("|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as root:
        for count in args.frames:
            frames = [frame(i * RECORDS_PER_FRAME) for i in range(count)]
            times = sorted(checkpoint_ms(frames, root) for _ in range(args.repeat))
            median, p90 = statistics.median(times), times[int(len(times) * 0.9) - 1]
            print(
                f"| {count} | {count * RECORDS_PER_FRAME:,} | {median:.2f} | {p90:.2f} | "
                f"{median / 1000:.2%} | {median / 5000:.3%} |"
            )


if __name__ == "__main__":
    main()
