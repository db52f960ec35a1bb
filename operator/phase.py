"""The phases of a StreamingJob (`status.phase`): what `kubectl get sj` shows and
`lockgate_operator_jobs` counts. The CRD's enum is this one (a test holds them
together); a job without a phase has not been handled yet."""

from __future__ import annotations

import enum


class JobPhase(enum.StrEnum):
    DEPLOYING = "Deploying"  # the first driver of a job (or of a resumed one) is starting
    RUNNING = "Running"  # the current driver said it runs
    UPGRADING = "Upgrading"  # an upgrade plan replaces the driver
    SUSPENDING = "Suspending"  # an upgrade plan stops the driver for good
    SUSPENDED = "Suspended"  # no driver, on purpose
    RESTARTING = "Restarting"  # the driver was lost; the operator's relaunch backoff runs
    FINISHED = "Finished"  # the driver's bounded sources ran out and it exited
    FAILED = "Failed"  # the driver ended the job: a permanent failure, or its restart strategy gave up
