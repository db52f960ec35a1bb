"""How record values and keys become Kafka message bytes, and back.

"json": a JSON document (UTF-8); "string": UTF-8 text; "bytes": as they are.
A value that cannot be decoded is an error naming its topic, partition and
offset; one that cannot be encoded names the sink and the record.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from lockgate.runtime.api.connectors import UnreadableRecordError

_ENCODE_JSON = json.JSONEncoder(separators=(",", ":")).encode


class RecordFormatError(ValueError):
    """A record that is not in the sink's value format."""


class UnreadableMessageError(UnreadableRecordError):
    """A message the source cannot read (not in its value format, too large), with no
    dead-letter location set."""


def decoder(value_format: str) -> Callable[[bytes], Any]:
    if value_format == "json":
        return json.loads
    if value_format == "string":
        return lambda data: data.decode("utf-8")
    return lambda data: data


def encoder(value_format: str, sink: str) -> Callable[[Any], bytes]:
    if value_format == "json":
        return lambda record: _ENCODE_JSON(record).encode()
    if value_format == "string":

        def encode_string(record: Any) -> bytes:
            if not isinstance(record, str):
                raise RecordFormatError(
                    f"Kafka sink {sink!r} writes strings (value_format='string'), got "
                    f"{type(record).__name__} {record!r}"
                )
            return record.encode()

        return encode_string

    def encode_bytes(record: Any) -> bytes:
        if not isinstance(record, bytes | bytearray):
            raise RecordFormatError(
                f"Kafka sink {sink!r} writes bytes (value_format='bytes'), "
                f"got {type(record).__name__} {record!r:.200}"
            )
        return bytes(record)

    return encode_bytes


def encode_key(key: Any, sink: str) -> bytes | None:
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    raise RecordFormatError(
        f"Kafka sink {sink!r}: key= returned {type(key).__name__} {key!r:.200}; "
        "it must return str, bytes or None"
    )
