"""Lockgate's runtime: the public job API and state.

Job code imports what it needs from here; these names are public API.
"""

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
