"""Lockgate's runtime: the public job API and state.

Job code imports what it needs from here; these names are public API. Each is
imported when first asked for: a job that reads only files never loads the Kafka
connectors, and the runtime's own modules (the spec, coordination, the driver)
load none of this when Python imports this package on their way.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lockgate.runtime.api.connectors import (
        Backlog,
        ForwardingSinkWriter,
        JobIdentity,
        Sink,
        SinkWriter,
        Source,
        SourceReader,
        SubtaskContext,
        UnreadableRecordError,
    )
    from lockgate.runtime.api.functions import Context, KeyedProcessFunction, RuntimeContext, TimerService
    from lockgate.runtime.api.graph import JobGraph
    from lockgate.runtime.api.stream import DataStream, KeyedStream, StreamEnvironment, WindowedStream
    from lockgate.runtime.api.validation import JobDefinitionError
    from lockgate.runtime.api.watermarks import WatermarkStrategy
    from lockgate.runtime.api.windows import (
        EventTimeSessionWindows,
        ProcessWindowFunction,
        SlidingEventTimeWindows,
        TimeWindow,
        TumblingEventTimeWindows,
        TumblingProcessingTimeWindows,
    )
    from lockgate.runtime.clock import Clock, ManualClock, SystemClock
    from lockgate.runtime.connectors.collect_sink import CollectSink
    from lockgate.runtime.connectors.file_sink import FileSink, read_committed
    from lockgate.runtime.connectors.generator_source import GeneratorSource
    from lockgate.runtime.connectors.kafka.sink import KafkaSink
    from lockgate.runtime.connectors.kafka.source import KafkaRecord, KafkaSource
    from lockgate.runtime.connectors.log_source import LogSource, MalformedRecordError
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

_MODULE_OF: dict[str, str] = {
    "Backlog": "lockgate.runtime.api.connectors",
    "ForwardingSinkWriter": "lockgate.runtime.api.connectors",
    "JobIdentity": "lockgate.runtime.api.connectors",
    "Sink": "lockgate.runtime.api.connectors",
    "SinkWriter": "lockgate.runtime.api.connectors",
    "Source": "lockgate.runtime.api.connectors",
    "SourceReader": "lockgate.runtime.api.connectors",
    "SubtaskContext": "lockgate.runtime.api.connectors",
    "UnreadableRecordError": "lockgate.runtime.api.connectors",
    "Context": "lockgate.runtime.api.functions",
    "KeyedProcessFunction": "lockgate.runtime.api.functions",
    "RuntimeContext": "lockgate.runtime.api.functions",
    "TimerService": "lockgate.runtime.api.functions",
    "JobGraph": "lockgate.runtime.api.graph",
    "DataStream": "lockgate.runtime.api.stream",
    "KeyedStream": "lockgate.runtime.api.stream",
    "StreamEnvironment": "lockgate.runtime.api.stream",
    "WindowedStream": "lockgate.runtime.api.stream",
    "JobDefinitionError": "lockgate.runtime.api.validation",
    "WatermarkStrategy": "lockgate.runtime.api.watermarks",
    "EventTimeSessionWindows": "lockgate.runtime.api.windows",
    "ProcessWindowFunction": "lockgate.runtime.api.windows",
    "SlidingEventTimeWindows": "lockgate.runtime.api.windows",
    "TimeWindow": "lockgate.runtime.api.windows",
    "TumblingEventTimeWindows": "lockgate.runtime.api.windows",
    "TumblingProcessingTimeWindows": "lockgate.runtime.api.windows",
    "Clock": "lockgate.runtime.clock",
    "ManualClock": "lockgate.runtime.clock",
    "SystemClock": "lockgate.runtime.clock",
    "CollectSink": "lockgate.runtime.connectors.collect_sink",
    "FileSink": "lockgate.runtime.connectors.file_sink",
    "read_committed": "lockgate.runtime.connectors.file_sink",
    "GeneratorSource": "lockgate.runtime.connectors.generator_source",
    "KafkaSink": "lockgate.runtime.connectors.kafka.sink",
    "KafkaRecord": "lockgate.runtime.connectors.kafka.source",
    "KafkaSource": "lockgate.runtime.connectors.kafka.source",
    "LogSource": "lockgate.runtime.connectors.log_source",
    "MalformedRecordError": "lockgate.runtime.connectors.log_source",
    "deserialize_key": "lockgate.runtime.key_serializer",
    "register_key_type": "lockgate.runtime.key_serializer",
    "serialize_key": "lockgate.runtime.key_serializer",
    "default_max_parallelism": "lockgate.runtime.keygroups",
    "key_group": "lockgate.runtime.keygroups",
    "key_group_range": "lockgate.runtime.keygroups",
    "operator_index": "lockgate.runtime.keygroups",
    "PickleSerializer": "lockgate.runtime.serializers",
    "Serializer": "lockgate.runtime.serializers",
    "AggregateFunction": "lockgate.runtime.state.descriptors",
    "AggregatingStateDescriptor": "lockgate.runtime.state.descriptors",
    "ListStateDescriptor": "lockgate.runtime.state.descriptors",
    "MapStateDescriptor": "lockgate.runtime.state.descriptors",
    "ReducingStateDescriptor": "lockgate.runtime.state.descriptors",
    "StateDescriptor": "lockgate.runtime.state.descriptors",
    "ValueStateDescriptor": "lockgate.runtime.state.descriptors",
    "AggregatingState": "lockgate.runtime.state.keyed",
    "ListState": "lockgate.runtime.state.keyed",
    "MapState": "lockgate.runtime.state.keyed",
    "ReducingState": "lockgate.runtime.state.keyed",
    "ValueState": "lockgate.runtime.state.keyed",
}
"""Each public name -> the module that defines it (what the imports above name, for type checkers)."""

__all__ = [
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "Backlog",
    "Clock",
    "CollectSink",
    "Context",
    "DataStream",
    "EventTimeSessionWindows",
    "FileSink",
    "ForwardingSinkWriter",
    "GeneratorSource",
    "JobDefinitionError",
    "JobGraph",
    "JobIdentity",
    "KafkaRecord",
    "KafkaSink",
    "KafkaSource",
    "KeyedProcessFunction",
    "KeyedStream",
    "ListState",
    "ListStateDescriptor",
    "LogSource",
    "MalformedRecordError",
    "ManualClock",
    "MapState",
    "MapStateDescriptor",
    "PickleSerializer",
    "ProcessWindowFunction",
    "ReducingState",
    "ReducingStateDescriptor",
    "RuntimeContext",
    "Serializer",
    "Sink",
    "SinkWriter",
    "SlidingEventTimeWindows",
    "Source",
    "SourceReader",
    "StateDescriptor",
    "StreamEnvironment",
    "SubtaskContext",
    "SystemClock",
    "TimeWindow",
    "TimerService",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "UnreadableRecordError",
    "ValueState",
    "ValueStateDescriptor",
    "WatermarkStrategy",
    "WindowedStream",
    "default_max_parallelism",
    "deserialize_key",
    "key_group",
    "key_group_range",
    "operator_index",
    "read_committed",
    "register_key_type",
    "serialize_key",
]


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # asked once: later reads do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
