"""What the operator's logic raises; `handlers.py` alone turns it into kopf's
errors (the logic itself never imports kopf's error types)."""

from __future__ import annotations


class RetryLaterError(Exception):
    """Not yet: try the handler again after `delay_s` (kopf's TemporaryError)."""

    def __init__(self, message: str, delay_s: float) -> None:
        super().__init__(message)
        self.delay_s = delay_s


class RefusedError(Exception):
    """Never, as it stands: a spec the operator will not run (kopf's PermanentError)."""
