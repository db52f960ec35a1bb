"""The heap backend: deserialized objects in dicts per key group, checkpointed in
the canonical format."""
