"""JSON lines as LogSource reads them and FileSink writes them: orjson (several times
the standard library's speed: these are the per-record hot path of a file-to-file
job), with the standard library's meaning kept exactly wherever the two differ.

orjson turns an integer of more than 64 bits into a float when it reads, and
refuses it when it writes; it writes NaN and infinities as null; it serializes
dataclasses, datetimes and subclasses the standard library refuses. Those
records go through the standard library, so a value reads and writes as it
always did, and a record the standard library cannot encode still fails the same
way.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_ENCODE_STDLIB = json.JSONEncoder(separators=(",", ":")).encode
# Types orjson would encode itself and the standard library refuses: handed back
# to the standard library, which raises as it always did.
_STRICT = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
# 19 digits in a row may be an integer beyond 64 bits, which orjson reads as a float.
# Found as 19 zeros once every digit reads as a zero: several times faster than a
# regular expression, which tries a match at every digit.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19


def encode_line(record: Any) -> bytes:
    """`record` as one line of compact JSON, newline included."""
    try:
        encoded = orjson.dumps(record, option=_STRICT)
    except TypeError:  # big integers, non-string keys, surrogates, other types
        return _ENCODE_STDLIB(record).encode() + b"\n"
    if b"null" in encoded:  # None, or a NaN or an infinity orjson wrote as null
        return _ENCODE_STDLIB(record).encode() + b"\n"
    return encoded + b"\n"


def decode_line(line: bytes) -> Any:
    """One JSON document; ValueError (UnicodeDecodeError included) if it is not one."""
    if _LONG_DIGITS not in line.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass  # NaN and Infinity, which the standard library reads; or not JSON at all
    return json.loads(line)


def decode_lines(lines: list[bytes]) -> list[Any] | None:
    """What `decode_line` reads from each line, when orjson reads every one of them
    as it is (one check and no Python call per line); else None, and the caller
    goes line by line: a blank line, a big integer, NaN, or not JSON."""
    if _LONG_DIGITS in b"\n".join(lines).translate(_DIGITS_AS_ZERO):
        return None
    try:
        return list(map(orjson.loads, lines))
    except orjson.JSONDecodeError:
        return None
