"""The stable key serializer: round trips, distinct types, user types, clear errors."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lockgate.runtime.key_serializer import deserialize_key, register_key_type, serialize_key

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary()
keys = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=12)


@given(keys)
def test_round_trip(key: object) -> None:
    assert deserialize_key(serialize_key(key)) == key


def _same_key(a: object, b: object) -> bool:
    """Key identity: same type all the way down (Python's == says (False,) == (0,))."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        assert isinstance(b, tuple)
        return len(a) == len(b) and all(_same_key(x, y) for x, y in zip(a, b, strict=True))
    return a == b  # floats: -0.0 == 0.0, which share bytes on purpose


@given(keys, keys)
def test_distinct_keys_have_distinct_bytes(a: object, b: object) -> None:
    assert (serialize_key(a) == serialize_key(b)) == _same_key(a, b)


def test_types_are_part_of_the_key() -> None:
    assert len({serialize_key(k) for k in (1, 1.0, True, "1", b"1", (1,))}) == 6


def test_negative_zero_is_zero() -> None:
    assert serialize_key(-0.0) == serialize_key(0.0)


@pytest.mark.parametrize("bad", [[1, 2], {"a": 1}, {1, 2}, object(), bytearray(b"x")])
def test_unsupported_type_names_the_type(bad: object) -> None:
    with pytest.raises(TypeError, match=type(bad).__qualname__):
        serialize_key(bad)


def test_unsupported_type_inside_tuple_names_the_inner_type() -> None:
    with pytest.raises(TypeError, match="list"):
        serialize_key(("ok", [1]))


@dataclass(frozen=True)
class Point:
    x: int
    y: int


def test_registered_user_type_round_trips() -> None:
    register_key_type(
        Point,
        "test.Point",
        lambda p: p.x.to_bytes(4, "big", signed=True) + p.y.to_bytes(4, "big", signed=True),
        lambda b: Point(int.from_bytes(b[:4], "big", signed=True), int.from_bytes(b[4:], "big", signed=True)),
    )
    key = ("user", Point(3, -4))
    assert deserialize_key(serialize_key(key)) == key


def test_type_id_cannot_be_taken_twice() -> None:
    class Other:
        pass

    register_key_type(Point, "test.Point", lambda p: b"", lambda b: Point(0, 0))
    with pytest.raises(ValueError, match=r"test\.Point.*Point"):
        register_key_type(Other, "test.Point", lambda o: b"", lambda b: Other())
