"""Lockgate's runtime: the public job API and state.

Job code imports what it needs from here; these names are public API.
"""

from lockgate.runtime.clock import Clock, ManualClock, SystemClock
from lockgate.runtime.key_serializer import deserialize_key, register_key_type, serialize_key
from lockgate.runtime.keygroups import (
    default_max_parallelism,
    key_group,
    key_group_range,
    operator_index,
)
from lockgate.runtime.serializers import PickleSerializer, Serializer
from lockgate.runtime.state.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from lockgate.runtime.state.keyed import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    ValueState,
)

__all__ = [
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "Clock",
    "ListState",
    "ListStateDescriptor",
    "ManualClock",
    "MapState",
    "MapStateDescriptor",
    "PickleSerializer",
    "ReducingState",
    "ReducingStateDescriptor",
    "Serializer",
    "StateDescriptor",
    "SystemClock",
    "ValueState",
    "ValueStateDescriptor",
    "default_max_parallelism",
    "deserialize_key",
    "key_group",
    "key_group_range",
    "operator_index",
    "register_key_type",
    "serialize_key",
]
