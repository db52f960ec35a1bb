"""Prometheus metrics of a running job: the driver's (checkpoints, restarts) and
every task's (records, backpressure, alignment, state size, source lag)."""
