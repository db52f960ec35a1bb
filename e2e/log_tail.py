"""The end of a process's log as a failure message shows it: without the lines
that say only that routine work went well, which would crowd out the cause."""

from __future__ import annotations

import re

ROUTINE = re.compile(
    r"kopf\.objects: (Timer|Handler|Daemon) '.*' succeeded\."  # every observation, every second
    r"|^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO "  # Spark's own INFO lines (log4j's format)
)


def telling_tail(text: str, chars: int = 6000) -> str:
    """The last `chars` characters of `text` once routine lines are dropped."""
    kept = [line for line in text.splitlines() if not ROUTINE.search(line)]
    return "\n".join(kept)[-chars:]
