"""Who an error speaks to. An error the user fixes by changing a setting of the run
names that setting the way the user gives it: `lockgate run`'s flag (and the
manifest's field), or `lockgate.testing.run_job`'s argument. Such an error keeps
what it found as fields and renders its message for the front end it is addressed
to (the command line unless a front end says otherwise), so no front end rewrites
another's words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FrontEnd = Literal["command line", "run_job"]
COMMAND_LINE: FrontEnd = "command line"
RUN_JOB: FrontEnd = "run_job"


@dataclass(frozen=True)
class Setting:
    """One setting of a run, as each front end names it."""

    flag: str  # `lockgate run`'s, e.g. "--allow-non-restored-state"
    argument: str  # `run_job`'s keyword, e.g. "allow_non_restored_state"
    field: str | None = None  # a StreamingJob manifest's, e.g. "spec.job.allowNonRestoredState"

    def set_to(self, value: object, front_end: FrontEnd) -> str:
        """How a user of `front_end` gives this setting `value`."""
        if front_end == RUN_JOB:
            return f"{self.argument}={value!r}"
        flag = self.flag if value is True else f"{self.flag} {value}"
        if self.field is None:
            return flag
        written = str(value).lower() if isinstance(value, bool) else value
        return f"{flag} ({self.field}: {written})"


ALLOW_NON_RESTORED_STATE = Setting(
    "--allow-non-restored-state", "allow_non_restored_state", "spec.job.allowNonRestoredState"
)
MAX_PARALLELISM = Setting("--max-parallelism", "max_parallelism")


def job_argument(key: str, value: str, front_end: FrontEnd) -> str:
    """How a user of `front_end` gives the job's argument `key` (`value`: a placeholder)."""
    if front_end == RUN_JOB:
        return f"run_job(args={{{key!r}: {value}}})"
    return f"--arg {key}={value}"


def snapshot_named(url: str, front_end: FrontEnd) -> str:
    """The snapshot a run restores, as its user named it: `run_job` restores only
    the savepoint given as `restore=` (its files live in memory, at a path of its own)."""
    return "the savepoint given as restore=" if front_end == RUN_JOB else url


class FrontEndError(Exception):
    """An error whose message depends on the front end it is addressed to. Its
    fields are its `args`, so that it pickles (a task's error crosses processes)."""

    front_end: FrontEnd = COMMAND_LINE

    def render(self, front_end: FrontEnd) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.render(self.front_end)


def address_to(error: BaseException, front_end: FrontEnd) -> None:
    """Address `error` (if its message depends on it) to `front_end`."""
    if isinstance(error, FrontEndError):
        error.front_end = front_end
