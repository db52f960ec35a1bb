"""The RocksDB backend: a column family per state, checkpointed incrementally from
its SST files (native_snapshot, native_restore) or in the canonical format."""
