"""Kafka: a replayable source and a sink that writes exactly once through Kafka
transactions (needs the `kafka` extra: confluent-kafka)."""
