"""Where a job's control plane is: an etcd cluster every process reaches, or a
store in this process's memory (tests and the in-process runner)."""

from __future__ import annotations

from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.kv_store import KeyValueStore

ControlPlane = EtcdConfig | InMemoryStore


def open_control_plane(plane: ControlPlane) -> KeyValueStore:
    """A client of `plane`: a new etcd connection (a connection serves the event loop
    it was made on, so each loop opens its own), or the in-memory store itself."""
    return Etcd(plane) if isinstance(plane, EtcdConfig) else plane


def shared_across_processes(plane: ControlPlane) -> bool:
    return isinstance(plane, EtcdConfig)
