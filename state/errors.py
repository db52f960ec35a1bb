"""What `lockgate.state` refuses, each naming the culprit and what the user can do."""

from __future__ import annotations


class StateAccessError(ValueError):
    """A path that holds no snapshot, an operator or state the snapshot does not
    hold, a request the snapshot cannot answer."""
