"""Keyed and operator state, and the heap and RocksDB backends that keep it."""
