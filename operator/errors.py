"""What the operator's logic raises; `handlers.py` alone turns it into kopf's
errors (the logic itself never imports kopf's error types)."""

from __future__ import annotations


class RetryLaterError(Exception):
    """Not yet: try the handler again after `delay_s` (kopf's TemporaryError)."""

    def __init__(self, message: str, delay_s: float) -> None:
        super().__init__(message)
        self.delay_s = delay_s


class RefusedError(Exception):
    """Never, as it stands: a spec the operator will not run (kopf's PermanentError);
    or, with `recheck_s`, not until something outside the spec changes (the
    namespace's labels): checked again after that many seconds (kopf's TemporaryError)."""

    def __init__(self, message: str, recheck_s: float | None = None) -> None:
        super().__init__(message)
        self.recheck_s = recheck_s
