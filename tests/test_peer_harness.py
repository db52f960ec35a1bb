"""The peer harness (bench/peers/keyed_count.py) checks what every system wrote;
its check must catch a lost, repeated or miscounted record, and its Lockgate run
must keep working. The peers themselves run only in the bench (their virtualenvs
are not test dependencies)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from peers.keyed_count import key_of, value_of, verify  # noqa: E402

COUNT, KEYS = 500, 7


def _reference() -> list[tuple[int, int, int, int]]:
    rows, state = [], {}
    for n in range(COUNT):
        k = key_of(n, KEYS)
        count, total = state.get(k, (0, 0))
        state[k] = count + 1, total + value_of(n)
        rows.append((k, n, *state[k]))
    return rows


def test_the_reference_passes_in_any_order() -> None:
    verify(reversed(_reference()), COUNT, KEYS)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda rows: rows[:-1], "never output"),
        (lambda rows: [*rows, rows[3]], "output twice"),
        (lambda rows: [(k, n, c, s + (n == 9)) for k, n, c, s in rows], "expected"),
        (lambda rows: [(k + (n == 9), n, c, s) for k, n, c, s in rows], "under key"),
    ],
    ids=["lost", "repeated", "wrong sum", "wrong key"],
)
def test_damaged_output_is_caught(damage, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        verify(damage(_reference()), COUNT, KEYS)


def test_the_harness_runs_lockgate_on_the_shared_input_and_verifies_its_output() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "peers" / "keyed_count.py"), "--count", "3000",
         "--keys", "11", "--systems", "lockgate"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| Lockgate |" in done.stdout
