"""Jobs the failure-class tests run through the operator: one whose code raises on
every record it is given (a failure a restart does not cure, but may: the
restart strategy decides)."""

from __future__ import annotations

from typing import Any

from lockgate.runtime import FileSink, GeneratorSource, StreamEnvironment


def _price(record: dict[str, Any]) -> dict[str, Any]:
    raise ValueError(f"no price for record {record['n']}")


def build(env: StreamEnvironment) -> None:
    source = GeneratorSource(1000, keys=10, partitions=2)
    env.source(source, name="numbers").map(_price, name="price").sink(
        FileSink(env.args["output"]), name="out"
    )
