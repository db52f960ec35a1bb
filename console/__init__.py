"""The `lockgate` command's entry point, apart from the runtime so that it runs
first. Python's SIGINT handler raises KeyboardInterrupt wherever the main thread
is, and the command's modules (the runtime's public API, pyspark) take a second or
more to import: a Ctrl-C meanwhile would end the command with a traceback and the
signal's status (-2) instead of its one line and 130. Nothing of Lockgate's is
imported until the interrupt can be caught."""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130
"""The shell's convention for a process ended by a signal it handled; the runtime's
`driver.termination.EXIT_INTERRUPTED`, not imported here (see above)."""


def interrupted(error: BaseException) -> bool:
    """Whether `error` is a Ctrl-C, or was caused by one: an interrupt that lands while
    Python creates a class reaches us as the RuntimeError of `__set_name__`, with
    the KeyboardInterrupt as its cause."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def main() -> int:
    try:
        from lockgate.runtime.cli import main as command  # noqa: PLC0415 - see the module's text

        return command()
    except BaseException as error:
        if not interrupted(error):
            raise
        words = sys.argv[1:2]
        name = "lockgate" if not words or words[0].startswith("-") else f"lockgate {words[0]}"
        print(f"{name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
