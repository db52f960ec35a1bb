"""The guard that keeps a stuck asyncio task from hanging the whole test run."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent


def test_a_task_that_swallows_its_cancellation_fails_its_test_by_name(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    monkeypatch.setenv("LOCKGATE_TEST_TASK_END_BOUND_S", "1")
    pytester.makeconftest('pytest_plugins = ["tests.task_leaks"]\n')
    pytester.makepyfile(
        test_stuck=textwrap.dedent(
            """
            import asyncio

            async def absorbs_one_cancellation():
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    await asyncio.Event().wait()  # clean-up that never ends

            async def test_leaves_a_stuck_task():
                asyncio.create_task(absorbs_one_cancellation(), name="stuck-clean-up")

            async def test_leaves_a_task_that_ends_when_cancelled():
                asyncio.create_task(asyncio.Event().wait())

            async def test_after_them_runs():
                pass
            """
        )
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--timeout", "120", "-o", "asyncio_mode=auto"
    )
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*did not end within*", "*absorbs_one_cancellation*"])
