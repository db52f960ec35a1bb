"""Sizing a job to its load: what its metrics say it needs (decision.py), and the
Flink Kubernetes Operator autoscaler's default algorithm on the same metrics
(flink_reference.py), both pure functions of a recorded series (series.py)."""
