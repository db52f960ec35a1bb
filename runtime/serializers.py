"""Value serializers: how state values become bytes in snapshots and in RocksDB."""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable
from typing import Any, Protocol


class Serializer(Protocol):
    """Turns values into bytes and back; must round-trip every value it accepts."""

    def dumps(self, value: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class PickleSerializer:
    """The default: any picklable value, at the highest pickle protocol."""

    def __init__(self) -> None:
        # pickle's own functions rather than methods that call them: state reads
        # and writes call these for every record.
        self.dumps: Callable[[Any], bytes] = functools.partial(pickle.dumps, protocol=pickle.HIGHEST_PROTOCOL)
        self.loads: Callable[[bytes], Any] = pickle.loads


DEFAULT_SERIALIZER: Serializer = PickleSerializer()
