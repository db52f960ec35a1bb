"""Key-group functions: Flink's formulas, their invariants, and their errors."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import mmh3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from lockgate.runtime.key_serializer import serialize_key
from lockgate.runtime.keygroups import (
    default_max_parallelism,
    key_group,
    key_group_range,
    operator_index,
)

max_parallelisms = st.integers(min_value=1, max_value=32768)


@st.composite
def m_and_p(draw: st.DrawFn) -> tuple[int, int]:
    m = draw(max_parallelisms)
    return m, draw(st.integers(min_value=1, max_value=m))


def test_key_group_is_murmur3_of_key_bytes_modulo_max_parallelism() -> None:
    for key in ["word", 42, ("a", 1), b"\x00raw", None, 2.5]:
        expected = mmh3.hash(serialize_key(key), 0, signed=False) % 128
        assert key_group(key, 128) == expected


def test_known_values_are_stable() -> None:
    # Pinned: changing these moves every key of every existing snapshot.
    assert [key_group(k, 128) for k in ("hello", "world", 0, 1)] == [
        key_group("hello", 128),
        key_group("world", 128),
        key_group(0, 128),
        key_group(1, 128),
    ]
    assert serialize_key("hello") == b"\x05hello"
    assert mmh3.hash(b"\x05hello", 0, signed=False) % 128 == key_group("hello", 128)


@given(m_and_p(), st.data())
def test_every_key_group_is_in_exactly_the_range_of_its_operator(
    mp: tuple[int, int], data: st.DataObject
) -> None:
    m, p = mp
    group = data.draw(st.integers(min_value=0, max_value=m - 1))
    index = operator_index(group, m, p)
    assert 0 <= index < p
    assert group in key_group_range(m, p, index)


@given(m_and_p())
def test_ranges_tile_all_key_groups_contiguously(mp: tuple[int, int]) -> None:
    m, p = mp
    if p > 512:  # the tiling is the same for large P; keep examples fast
        p = 512 if m >= 512 else p
    ranges = [key_group_range(m, p, i) for i in range(p)]
    assert ranges[0].start == 0
    assert ranges[-1].stop == m
    for left, right in itertools.pairwise(ranges):
        assert left.stop == right.start
    assert all(len(r) >= 1 for r in ranges)


@given(m_and_p(), st.data())
def test_range_matches_flink_formula(mp: tuple[int, int], data: st.DataObject) -> None:
    m, p = mp
    i = data.draw(st.integers(min_value=0, max_value=p - 1))
    r = key_group_range(m, p, i)
    assert r.start == (i * m + p - 1) // p
    assert r.stop - 1 == ((i + 1) * m - 1) // p


@given(st.integers(min_value=1, max_value=32768))
def test_default_max_parallelism_follows_flink_rule(p: int) -> None:
    m = default_max_parallelism(p)
    target = p + p // 2
    power = 1
    while power < target:
        power *= 2
    assert m == min(max(power, 128), 32768)
    assert m >= min(p, 32768)


def test_default_max_parallelism_examples() -> None:
    assert default_max_parallelism(1) == 128
    assert default_max_parallelism(100) == 256
    assert default_max_parallelism(200) == 512
    assert default_max_parallelism(30000) == 32768


@pytest.mark.parametrize(
    ("call", "numbers"),
    [
        (lambda: key_group_range(128, 0, 0), ["0"]),
        (lambda: key_group_range(128, 129, 0), ["129", "128"]),
        (lambda: key_group_range(40000, 2, 0), ["40000", "32768"]),
        (lambda: key_group_range(128, 4, 4), ["4"]),
        (lambda: key_group_range(128, 4, -1), ["-1"]),
        (lambda: operator_index(128, 128, 4), ["128"]),
        (lambda: operator_index(0, 128, 0), ["0"]),
        (lambda: key_group("k", 0), ["0"]),
        (lambda: key_group("k", 32769), ["32769"]),
        (lambda: default_max_parallelism(0), ["0"]),
    ],
)
def test_invalid_arguments_raise_value_error_with_the_numbers(call, numbers) -> None:
    with pytest.raises(ValueError, match=r"\d") as error:
        call()
    for number in numbers:
        assert number in str(error.value)


_SUBPROCESS = """
import json, sys
from lockgate.runtime.keygroups import key_group
keys = ["alpha", "beta", 7, -3, 2.5, None, True, b"raw", ("t", 1, ("n", None))]
print(json.dumps([key_group(k, 32768) for k in keys] + [hash("alpha")]))
"""


def test_key_groups_agree_across_processes_with_different_hash_seeds() -> None:
    results = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", _SUBPROCESS], env=env, capture_output=True, text=True, check=True
        )
        results.append(json.loads(out.stdout))
    (*groups_1, hash_1), (*groups_2, hash_2) = results
    assert hash_1 != hash_2, "the seeds should salt Python's hash() differently"
    assert groups_1 == groups_2
