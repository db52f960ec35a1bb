"""Snapshots of state in checkpoint storage: formats, metadata, restore."""
