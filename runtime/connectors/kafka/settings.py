"""What a Kafka source or sink is told, checked where it is declared, and the
checks against the broker that run on the driver before any task starts.

Arguments of the wrong type or value are a `JobDefinitionError` naming the
argument. `properties` go to the client (librdkafka) as they are, except the
ones the connector owns (the group it reads for, its transactions, how it
commits): setting one of those would break the guarantee, so it is refused.
An unknown property or a bad value is reported by librdkafka itself when the
client is made, and raised naming the property.
"""

from __future__ import annotations

import importlib
import time
from types import ModuleType
from typing import Any

from lockgate.runtime.api.validation import JobDefinitionError

BROKER_TIMEOUT_S = 10.0
"""How long the driver waits for the broker to answer before it refuses to start."""
ALL_BROKERS_DOWN_S = 2.0
"""Before a job starts, brokers that all refuse connections for this long are taken
as unreachable at once; a broker that accepts a connection and does not answer is
waited for up to BROKER_TIMEOUT_S."""
METADATA_ATTEMPT_S = 0.5

VALUE_FORMATS = ("json", "string", "bytes")

OWNED_PROPERTIES = frozenset(
    {
        "bootstrap.servers",
        "group.id",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "enable.partition.eof",
        "auto.offset.reset",
        "transactional.id",
        "enable.idempotence",
        "isolation.level",
    }
)


class KafkaConnectorError(RuntimeError):
    """While the job runs: the broker refused what the connector asked, or could not be reached."""


class KafkaSetupError(ValueError):
    """Before the job starts: the broker, a topic or a property the job cannot use
    (a ValueError, so `lockgate run` refuses the job naming the connector)."""


def kafka_client() -> ModuleType:
    """confluent_kafka, or an error saying how to install it (it is an extra)."""
    try:
        importlib.import_module("confluent_kafka.admin")  # a submodule the package does not import
        return importlib.import_module("confluent_kafka")
    except ImportError:
        raise JobDefinitionError(
            "the Kafka connectors need confluent-kafka: pip install 'lockgate[kafka]'"
        ) from None


def check_text(what: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise JobDefinitionError(f"{what} takes a non-empty string, got {type(value).__name__} {value!r}")
    return value


def check_choice(what: str, value: Any, choices: tuple[Any, ...]) -> Any:
    if value not in choices or isinstance(value, bool):
        raise JobDefinitionError(f"{what} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def check_properties(what: str, properties: Any) -> dict[str, str]:
    """The client properties, as librdkafka takes them (strings)."""
    if properties is None:
        return {}
    if not isinstance(properties, dict):
        raise JobDefinitionError(f"{what} properties take a dict, got {type(properties).__name__}")
    checked: dict[str, str] = {}
    for name, value in properties.items():
        if not isinstance(name, str):
            raise JobDefinitionError(f"{what} property names are strings, got {name!r}")
        if name in OWNED_PROPERTIES:
            raise JobDefinitionError(
                f"{what} property {name!r} is set by Lockgate (it keeps the delivery guarantee); "
                "remove it from properties"
            )
        if isinstance(value, bool):
            checked[name] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            checked[name] = str(value)
        else:
            raise JobDefinitionError(
                f"{what} property {name!r} takes a string, number or bool, got {type(value).__name__}"
            )
    return checked


def make_client(factory: Any, config: dict[str, Any], what: str) -> Any:
    """A client of `factory` (Producer, Consumer, AdminClient); a bad property is
    an error naming it."""
    kafka = kafka_client()
    try:
        return factory(config)
    except (kafka.KafkaException, ValueError, TypeError) as error:
        raise JobDefinitionError(f"{what}: the Kafka client refused its properties: {error}") from None


def check_topics(what: str, properties: dict[str, str], servers: str, topics: list[str]) -> None:
    """An error naming the broker or the topic when the broker cannot be reached
    or a topic does not exist."""
    kafka = kafka_client()
    failures = _ConnectionFailures(kafka)
    config: dict[str, Any] = {**properties, "bootstrap.servers": servers, "error_cb": failures.heard}
    admin = make_client(kafka.admin.AdminClient, config, what)
    deadline = time.monotonic() + BROKER_TIMEOUT_S
    attempt_s = METADATA_ATTEMPT_S
    while True:
        try:
            # Attempts grow: a timed-out request is dropped, and a cluster slow to answer
            # must still get one long enough.
            metadata = admin.list_topics(timeout=min(attempt_s, max(deadline - time.monotonic(), 0.1)))
            break
        except kafka.KafkaException as error:
            admin.poll(0)  # serves failures.heard
            now = time.monotonic()
            refused = failures.refused_for(ALL_BROKERS_DOWN_S, since=now - attempt_s)
            if now < deadline and not refused:
                attempt_s *= 2
                continue
            how = (
                f"every broker refused or dropped the connection for {ALL_BROKERS_DOWN_S:g} s"
                if refused
                else f"no answer within {BROKER_TIMEOUT_S:.0f} s"
            )
            raise KafkaSetupError(
                f"{what}: cannot reach Kafka at {servers}: {how} ({failures.last or error}); "
                "check bootstrap_servers and that the brokers run"
            ) from None
    for topic in topics:
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            reason = "it does not exist" if found is None or found.error is None else str(found.error)
            raise KafkaSetupError(
                f"{what}: topic {topic!r} on {servers} cannot be used: {reason}; create it first "
                "(Lockgate does not create topics)"
            )


class _ConnectionFailures:
    """What librdkafka reported of the connections while the driver asks for metadata.
    Brokers count as refusing once it said every broker was down and connections have
    failed since without a break: it reports no recovery, so a failure heard during
    the last attempt is what shows they still fail. Reports are heard when the attempt
    ends, so a broker that came back during an attempt whose answer came too late for
    it is refused too; attempts double in length, and `lockgate run` can be run again."""

    def __init__(self, kafka: ModuleType) -> None:
        self._kafka = kafka
        self._all_down_at: float | None = None
        self._failed_at = 0.0
        self.last: str | None = None  # the last error heard, in librdkafka's words

    def heard(self, error: Any) -> None:
        now = time.monotonic()
        self.last = error.str()
        if error.code() == self._kafka.KafkaError._ALL_BROKERS_DOWN:
            if self._all_down_at is None:
                self._all_down_at = now
            self._failed_at = now
        elif error.code() == self._kafka.KafkaError._TRANSPORT:
            self._failed_at = now

    def refused_for(self, seconds: float, *, since: float) -> bool:
        """Whether every broker was down at least `seconds` ago and a connection failed
        after `since` (during the last attempt)."""
        return (
            self._all_down_at is not None
            and time.monotonic() - self._all_down_at >= seconds
            and self._failed_at >= since
        )
