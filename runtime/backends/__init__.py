"""The keyed state backends, one package each: the backend, its TTL sweep and the
snapshot strategies it owns (see snapshot.checkpointable)."""
