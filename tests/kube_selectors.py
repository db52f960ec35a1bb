"""Label and field selectors as the API server reads them from `?labelSelector=`
and `?fieldSelector=`: what list, watch and deletion of a collection filter by.

Labels: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`,
comma-separated, all must hold. Fields: `path=v`, `path==v`, `path!=v` over a
dotted path of the object (`metadata.name`, `status.phase`); an absent field
reads as the empty string, as the API server's field sets do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Requirement = Callable[[Mapping[str, str]], bool]

_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s*\((.*)\)\s*$")
_EQUALITY = re.compile(r"^\s*([^\s!=]+)\s*(==|=|!=)\s*([^\s]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


class SelectorError(ValueError):
    """A selector the API server would refuse with 400 Bad Request."""


def _terms(selector: str) -> list[str]:
    """Split on the commas outside `( … )`."""
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [term for term in terms if term.strip()]


def _requirement(term: str) -> Requirement:
    if match := _SET.match(term):
        key, operator, values = match[1], match[2], {v.strip() for v in match[3].split(",")}
        if operator == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _EQUALITY.match(term):
        key, operator, value = match[1], match[2], match[3]
        if operator == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _EXISTS.match(term):
        negated, key = bool(match[1]), match[2]
        return lambda labels: (key in labels) != negated
    raise SelectorError(f"unparsable selector requirement {term!r}")


def label_matcher(selector: str | None) -> Requirement:
    """Whether a label set satisfies `selector` (None or empty: everything does)."""
    requirements = [_requirement(term) for term in _terms(selector or "")]
    return lambda labels: all(requirement(labels) for requirement in requirements)


def _field(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


def field_matcher(selector: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """Whether an object's fields satisfy `selector` (None or empty: everything does)."""
    terms = []
    for term in _terms(selector or ""):
        match = _EQUALITY.match(term)
        if match is None:
            raise SelectorError(f"unparsable field selector requirement {term!r}")
        terms.append((match[1], match[2] == "!=", match[3]))
    return lambda obj: all((_field(obj, path) == value) != negated for path, negated, value in terms)


def object_matcher(params: Mapping[str, str]) -> Callable[[Mapping[str, Any]], bool]:
    """The filter of a request's `labelSelector` and `fieldSelector` over whole objects."""
    labels = label_matcher(params.get("labelSelector"))
    fields = field_matcher(params.get("fieldSelector"))
    return lambda obj: labels((obj.get("metadata") or {}).get("labels") or {}) and fields(obj)
