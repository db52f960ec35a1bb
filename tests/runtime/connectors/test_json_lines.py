"""LogSource and FileSink read and write JSON lines through orjson, and mean exactly
what the standard library means wherever the two differ."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lockgate.runtime.connectors.json_lines import decode_line, decode_lines, encode_line


class Colour(enum.IntEnum):
    RED = 1


@dataclasses.dataclass
class Point:
    x: int


RECORDS = {
    "an integer beyond 64 bits": {"n": 2**70, "m": -(2**64) - 1},
    "19 digits inside a string": {"id": "1234567890123456789", "n": 1},
    "an integer at 64 bits": {"n": 2**63 - 1},
    "None": {"a": None},
    "integer keys": {1: "one", 2: "two"},
    "an int subclass": {"c": Colour.RED},
    "non-ASCII": {"name": "Zoë", "city": "東京"},
    "a lone surrogate": {"s": "\ud800"},
    "floats": {"a": 1e16, "b": 0.1, "c": -0.0},
    "nesting": {"a": [1, {"b": [True, False, None]}], "t": (1, 2)},
}


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("record", RECORDS.values(), ids=RECORDS.keys())
def test_a_record_reads_back_as_the_standard_library_reads_back_what_it_writes(record: Any) -> None:
    line = encode_line(record)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert _same(decode_line(line), json.loads(json.dumps(record)))


def test_nan_and_infinities_are_kept_not_turned_into_null() -> None:
    back = decode_line(encode_line({"nan": math.nan, "inf": math.inf, "ninf": -math.inf}))
    assert math.isnan(back["nan"])
    assert back["inf"] == math.inf
    assert back["ninf"] == -math.inf
    assert decode_line(b'{"x": NaN}\n')["x"] != 0


def test_a_big_integer_in_the_input_is_read_exactly() -> None:
    assert decode_line(b'{"n": 123456789012345678901234567890}') == {"n": 123456789012345678901234567890}


@pytest.mark.parametrize("value", [datetime.datetime(2026, 1, 1), Point(1), {1, 2}, object()])
def test_a_value_the_standard_library_refuses_is_refused_the_same_way(value: Any) -> None:
    with pytest.raises(TypeError, match="is not JSON serializable"):
        encode_line({"v": value})


@pytest.mark.parametrize("line", [b"{not json}", b'{"a": 1', b"\xff\xfe", b"[1,]"])
def test_a_line_that_is_not_json_fails_as_the_standard_library_fails(line: bytes) -> None:
    try:
        json.loads(line)
    except ValueError as error:
        theirs = str(error)
    with pytest.raises(ValueError, match=re.escape(theirs)):
        decode_line(line)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=12,
)


@given(JSON)
def test_any_json_value_round_trips(value: Any) -> None:
    assert _same(decode_line(encode_line(value)), value)


LINES = st.lists(
    st.one_of(
        JSON.map(lambda value: encode_line(value).rstrip(b"\n")),
        st.integers(min_value=-(2**80), max_value=2**80).map(lambda n: b'{"n": %d}' % n),
        st.sampled_from([b"", b"  ", b'{"x": NaN}', b"{not json}", b"\xff", b"[1,]", b'"a', b'b"', b"1,2"]),
    ),
    max_size=8,
)


@given(LINES)
def test_a_batch_of_lines_reads_as_each_line_reads_or_is_left_to_them(lines: list[bytes]) -> None:
    """`decode_lines` is the batch fast path of LogSource: it may decline a batch
    (None), but what it returns is what `decode_line` returns for every line."""
    batch = decode_lines(lines)
    if batch is not None:
        assert len(batch) == len(lines)
        for line, record in zip(lines, batch, strict=True):
            assert _same(record, decode_line(line)), line


def test_a_batch_of_plain_records_takes_the_fast_path_and_one_that_needs_care_does_not() -> None:
    plain = [encode_line({"n": n, "k": f"key-{n}", "v": n / 3}) for n in range(100)]
    assert decode_lines(plain) == [decode_line(line) for line in plain]
    for careful in (b"", b'{"n": 1234567890123456789}', b'{"x": NaN}', b"{not json}"):
        assert decode_lines([*plain, careful]) is None, careful
    # Digits split by a line break are two numbers, not one long one.
    assert decode_lines([b"1234567890", b"123456789"]) == [1234567890, 123456789]
