"""The TCP exchange alone: one authenticated channel over loopback.

A sender thread pushes frames as fast as its credit allows; the receiver polls
them the way a chain does (waiting 5 ms on its wakeup when nothing is there).
Frames of 512 records (the default batch) show the throughput a job sees;
frames of 1 record show the per-frame cost at its worst. Each size is run
`--repeat` times, alternating, and the median is printed: records per second
(wall clock), and the CPU time the process spent per frame (all its threads:
sender, receiver, the channel's reader threads), which a machine shared with
other work distorts less than the wall clock.

    .venv/bin/python bench/exchange_throughput.py [--records N] [--batches 512 1] [--repeat 5]
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import threading
import time

from lockgate.runtime.engine.events import EndOfStream
from lockgate.runtime.engine.handshake import ChannelId
from lockgate.runtime.engine.network import ExchangeServer, RemoteOutputChannel

IDLE_WAIT_S = 0.005  # as a chain waits on its wakeup


def run(records: int, batch: int, capacity: int) -> tuple[float, float]:
    """Records per second through one channel, from the first send to the end of
    stream, and CPU seconds per frame."""
    secret = secrets.token_bytes(32)
    channel = ChannelId("bench", 1, "exchange", 0, 1)
    server = ExchangeServer(secret)
    wakeup = threading.Event()
    inbound = server.expect(channel, capacity, wakeup)
    server.start()
    outbound = RemoteOutputChannel(server.address, channel, secret, threading.Event())
    outbound.connect()
    frames = [[(f"key-{i + j}", i + j) for j in range(batch)] for i in range(0, records, batch)]
    records = sum(len(frame) for frame in frames)

    def send() -> None:
        for frame in frames:
            outbound.send(frame)
        outbound.send(EndOfStream())

    sender = threading.Thread(target=send)
    started = time.perf_counter()
    cpu_started = time.process_time()
    sender.start()
    received = 0
    while True:
        element = inbound.poll()
        if element is None:
            wakeup.wait(IDLE_WAIT_S)
            wakeup.clear()
        elif isinstance(element, EndOfStream):
            break
        else:
            assert isinstance(element, list)
            received += len(element)
    elapsed = time.perf_counter() - started
    sender.join()
    cpu = time.process_time() - cpu_started
    outbound.close()
    server.close()
    assert received == records, f"{received} of {records} records arrived"
    return records / elapsed, cpu / len(frames)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=2_048_000, help="records per run (default 2,048,000)")
    parser.add_argument("--batches", type=int, nargs="+", default=[512, 1], help="records per frame")
    parser.add_argument("--capacity", type=int, default=16, help="frames of credit (default 16)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    results: dict[int, list[float]] = {batch: [] for batch in args.batches}
    cpu: dict[int, list[float]] = {batch: [] for batch in args.batches}
    for _ in range(args.repeat):
        for batch in args.batches:
            # Frames of one record are slow: a tenth of the records keeps the run short.
            records = args.records if batch > 1 else args.records // 10
            rate, cpu_per_frame = run(records, batch, args.capacity)
            results[batch].append(rate)
            cpu[batch].append(cpu_per_frame)
    for batch, rates in results.items():
        runs = ", ".join(f"{r:,.0f}" for r in rates)
        per_frame = ", ".join(f"{c * 1e6:.1f}" for c in cpu[batch])
        print(
            f"{batch:>4} records/frame: median {statistics.median(rates):>11,.0f} records/s, "
            f"{statistics.median(cpu[batch]) * 1e6:.1f} µs CPU/frame; runs {runs} records/s; "
            f"{per_frame} µs/frame"
        )


if __name__ == "__main__":
    main()
