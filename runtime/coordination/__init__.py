"""Checkpoint coordination through etcd: the contract between driver, tasks, operator and CLI."""
