"""keys.py's docstring is the etcd contract operators and tools read: every key
the code builds is in it."""

from __future__ import annotations

import inspect
import re

from lockgate.runtime.coordination import keys as keys_module
from lockgate.runtime.coordination.keys import JobKeys

SAMPLE_ARGUMENTS = {
    "checkpoint_id": 7,
    "vertex": "sum",
    "subtask": 1,
    "task": 1,
    "request_id": "r-1",
    "launch": 3,
    "point": "sum/ids fenced",
}


def _documented() -> list[re.Pattern[str]]:
    lines = [line.split()[0] for line in (keys_module.__doc__ or "").splitlines() if line.startswith("/")]
    return [
        re.compile("^" + re.sub(r"<[^>]+>", "[^/]+", re.escape(line).replace(r"\<", "<").replace(r"\>", ">")))
        for line in lines
    ]


def _built(job: JobKeys) -> dict[str, str]:
    built = {}
    for name, member in inspect.getmembers(JobKeys):
        if name.startswith("_") or name in ("root", "namespace", "job"):
            continue
        if isinstance(member, property):
            built[name] = getattr(job, name).decode()
        elif inspect.isfunction(member) and not isinstance(
            inspect.getattr_static(JobKeys, name), staticmethod
        ):
            parameters = list(inspect.signature(member).parameters)[1:]
            built[name] = getattr(job, name)(*(SAMPLE_ARGUMENTS[p] for p in parameters)).decode()
    return built


def test_every_key_the_code_builds_is_documented() -> None:
    patterns = _documented()
    for name, key in _built(JobKeys("ns", "job")).items():
        # A prefix (ending in '/') is documented when some documented key lies under it.
        documented = any(
            p.match(key) if not key.endswith("/") else p.match(key + "x/y/z") or p.match(key + "x")
            for p in patterns
        )
        assert documented, f"JobKeys.{name} builds {key}, which keys.py does not document"
