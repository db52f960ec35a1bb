"""Value serializers: how state values become bytes in snapshots and in RocksDB."""

from __future__ import annotations

import pickle
from typing import Any, Protocol


class Serializer(Protocol):
    """Turns values into bytes and back; must round-trip every value it accepts."""

    def dumps(self, value: Any) -> bytes:
        """The bytes of `value`."""

    def loads(self, data: bytes) -> Any:
        """The value `dumps` made these bytes from."""


class PickleSerializer:
    """The default: any picklable value, at the highest pickle protocol."""

    def dumps(self, value: Any) -> bytes:
        """`value` pickled with the highest protocol."""
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)

    def loads(self, data: bytes) -> Any:
        """The unpickled value."""
        return pickle.loads(data)


DEFAULT_SERIALIZER: Serializer = PickleSerializer()
