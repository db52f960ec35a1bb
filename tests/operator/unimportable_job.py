"""A job whose code does not import: what the failure-class tests launch through
the operator (never imported by the tests themselves)."""

from __future__ import annotations

import lockgate_pricing_tables  # type: ignore[import-not-found]  # noqa: F401 - not installed, as a job's dependency may not be
from lockgate.runtime import StreamEnvironment


def build(env: StreamEnvironment) -> None:
    raise AssertionError("never reached: the module does not import")
