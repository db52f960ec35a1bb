"""Argparse types for the job options: a bad value is refused while the command
line is parsed, with argparse's `argument --flag: ...` and what the flag takes."""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Callable

from lockgate.runtime.coordination.keys import check_name
from lockgate.runtime.metrics.serving import PortRange
from lockgate.runtime.spec.durations import parse_duration, positive_duration
from lockgate.runtime.spec.model import INT32
from lockgate.runtime.storage_url import syntax_of_storage_url


def _refusing(parse: Callable[[str], object]) -> Callable[[str], object]:
    """`parse`, its ValueError turned into what argparse prints as the flag's error."""

    def typed(text: str) -> object:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    typed.__name__ = parse.__name__
    return typed


def integer(low: int, high: int = INT32) -> Callable[[str], object]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise ValueError(f"must be an integer from {low} to {high}, got {text!r}")
        return value

    return _refusing(parse)


def fraction(low: float, high: float) -> Callable[[str], object]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:  # NaN too
            raise ValueError(f"must be a number from {low:g} to {high:g}, got {text!r}")
        return value

    return _refusing(parse)


def _replica_range(text: str) -> tuple[int, int]:
    low, colon, high = text.partition(":")
    if not (colon and low.isdigit() and high.isdigit() and 1 <= int(low) <= int(high) <= INT32):
        raise ValueError(f"must be MIN:MAX, whole numbers with 1 <= MIN <= MAX (e.g. 1:8), got {text!r}")
    return int(low), int(high)


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise ValueError(f"must be a port 0-65535 (0: any free port), got {text!r}")
    return int(text)


def _address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise ValueError(
            f"must be an IP address to listen on (0.0.0.0: every interface), got {text!r}"
        ) from None


def _name(kind: str) -> Callable[[str], object]:
    return _refusing(lambda text: check_name(kind, text, say_kind=False))


def _job_arg(pair: str) -> tuple[str, str]:
    key, equals, value = pair.partition("=")
    if not equals or not key:
        raise ValueError(f"{pair!r} must be KEY=VALUE")
    return key, value


port = _refusing(_port)
replica_range = _refusing(_replica_range)
listen_address = _refusing(_address)
port_range = _refusing(PortRange.parse)
seconds = _refusing(parse_duration)
positive_seconds = _refusing(positive_duration)
storage_url = _refusing(syntax_of_storage_url)  # its protocol: `preflight`, once the job is imported
job_id = _name("job id")
namespace = _name("namespace")
job_arg = _refusing(_job_arg)
request_id = _name("request id")
