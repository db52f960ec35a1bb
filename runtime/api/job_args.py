"""`env.args`: the job's own arguments (`lockgate run --arg k=v`, a manifest's
`spec.job.args`), strings by key, with errors that name the argument.

A missing one raises `MissingJobArgumentError` (a `KeyError`, so `except
KeyError` in job code still works) saying how to give it. `int(env.args["n"])`
of a value that is not a number fails with Python's own message, which names
only the value; the build adds a note naming the argument (`note_arguments`).
The typed readers — `env.args.int("n", 10)`, `.float`, `.bool` — say both at once.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

from lockgate.runtime.api.front_ends import RUN_JOB, FrontEnd, FrontEndError, job_argument
from lockgate.runtime.api.validation import JobDefinitionError

T = TypeVar("T")
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


class _ArgumentError(FrontEndError, JobDefinitionError):
    asked_in: str | None = None
    """Where the job's code asked for the argument (set by the build)."""

    def __str__(self) -> str:
        message = self.render(self.front_end)
        return message if self.asked_in is None else f"{message} (asked for in {self.asked_in})"


class MissingJobArgumentError(_ArgumentError, KeyError):
    def __init__(self, key: str, given: list[str]) -> None:
        super().__init__(key, given)
        self.key, self.given = key, given

    def render(self, front_end: FrontEnd) -> str:
        if front_end == RUN_JOB:
            how = f"give it in {job_argument(self.key, '...', front_end)}"
        else:
            given = job_argument(self.key, "VALUE", front_end)
            how = f"give it with {given} (or in the manifest's spec.job.args)"
        return f"job argument {self.key!r} is missing: {how}; given: {', '.join(self.given) or 'none'}"

    __str__ = _ArgumentError.__str__  # KeyError's would quote the key


class JobArgumentError(_ArgumentError):
    """An argument whose value is not what the job reads it as (`env.args.int(...)`)."""

    def __init__(self, key: str, value: str, expected: str) -> None:
        super().__init__(key, value, expected)
        self.key, self.value, self.expected = key, value, expected

    def render(self, front_end: FrontEnd) -> str:
        given = job_argument(self.key, "...", front_end)
        return f"job argument {self.key}={self.value!r} is not {self.expected}: give it with {given}"


class JobArgs(Mapping[str, str]):
    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._values = dict(values or {})

    def __getitem__(self, key: str) -> str:
        try:
            return self._values[key]
        except KeyError:
            raise MissingJobArgumentError(key, sorted(self._values)) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"JobArgs({self._values!r})"

    # The readers are named after the types they return; inside the class the
    # annotations therefore name the builtins explicitly.
    def int(self, key: str, default: builtins.int | None = None) -> builtins.int:
        return self._read(key, default, builtins.int, "an integer")

    def float(self, key: str, default: builtins.float | None = None) -> builtins.float:
        return self._read(key, default, builtins.float, "a number")

    def bool(self, key: str, default: builtins.bool | None = None) -> builtins.bool:
        def parse(value: str) -> builtins.bool:
            if value.lower() in _TRUE + _FALSE:
                return value.lower() in _TRUE
            raise ValueError(value)

        return self._read(key, default, parse, "true or false")

    def _read(self, key: str, default: T | None, parse: Callable[[str], T], what: str) -> T:
        if key not in self._values:
            if default is None:
                raise MissingJobArgumentError(key, sorted(self._values))
            return default
        try:
            return parse(self._values[key])
        except ValueError:
            raise JobArgumentError(key, self._values[key], what) from None


def note_arguments(error: BaseException, args: Mapping[str, str]) -> None:
    """When `error`'s message quotes the value of some argument (Python's own
    `int()` error does), add a note naming which."""
    message = str(error)
    for key, value in args.items():
        if value and repr(value) in message:
            error.add_note(f"{value!r} is the value of job argument {key} (--arg {key}=...)")
