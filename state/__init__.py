"""A job's state, read and written outside the job: savepoints and retained
checkpoints opened by path, one keyed state as rows (an iterator, a pandas
DataFrame, a Spark DataFrame read in parallel by key-group range:
`lockgate.state.spark`), and new savepoints written from rows, a Spark DataFrame
or another savepoint (`SavepointWriter`), signed with the job's key. See
docs/state.md.

    from lockgate.state import open_snapshot, job_key

    saved = open_snapshot("file:///…/savepoint-3f2a", job_key("word-count"))
    for row in saved.rows("count", "count", key="lockgate"):
        print(row)  # {'key': 'lockgate', 'value': 42}
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lockgate.state.errors import StateAccessError
    from lockgate.state.keys import job_key
    from lockgate.state.rows import ReadOptions
    from lockgate.state.saved import OperatorInfo, SavedState, StateRef, open_snapshot
    from lockgate.state.writer import KeyContext, SavepointWriter

# Imported when first used: `lockgate`'s parser imports `lockgate.state.command`,
# and with it this package, at the start of every command.
_HOMES = {
    "StateAccessError": "errors",
    "job_key": "keys",
    "ReadOptions": "rows",
    "OperatorInfo": "saved",
    "SavedState": "saved",
    "StateRef": "saved",
    "open_snapshot": "saved",
    "KeyContext": "writer",
    "SavepointWriter": "writer",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'lockgate.state' has no attribute {name!r}")
    return getattr(importlib.import_module(f"lockgate.state.{home}"), name)


__all__ = [
    "KeyContext",
    "OperatorInfo",
    "ReadOptions",
    "SavedState",
    "SavepointWriter",
    "StateAccessError",
    "StateRef",
    "job_key",
    "open_snapshot",
]
