"""Value serializers: how state values become bytes in snapshots and in RocksDB."""

from __future__ import annotations

import pickle
from typing import Any, Protocol


class Serializer(Protocol):
    """Turns values into bytes and back; must round-trip every value it accepts."""

    def dumps(self, value: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class PickleSerializer:
    """The default: any picklable value, at the highest pickle protocol."""

    def dumps(self, value: Any) -> bytes:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)

    def loads(self, data: bytes) -> Any:
        return pickle.loads(data)


DEFAULT_SERIALIZER: Serializer = PickleSerializer()
