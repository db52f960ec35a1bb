"""Keyed and operator state: what every backend shares (the backends are in `backends`)."""
