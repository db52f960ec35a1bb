"""A StreamingJob spec's validation errors as a user reads them: each names its field
the way the YAML spells it (`spec.checkpointing.mode`), says what the field takes
and what it got, and suggests the field a misspelt name was meant to be."""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails


class SpecError(ValueError):
    """The spec cannot be run; the message names each field that is wrong."""


def describe(error: ValidationError, model: type[BaseModel], root: str) -> str:
    problems = [_problem(detail, model, root) for detail in error.errors(include_url=False)]
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems:\n" + "\n".join(f"  {p}" for p in problems)


def _where(root: str, loc: tuple[int | str, ...]) -> str:
    where = root
    for segment in loc:
        where += f"[{segment}]" if isinstance(segment, int) else f"{'.' if where else ''}{segment}"
    return where


_TYPES = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "string_type": "a string",
    "bool_type": "true or false",
    "float_type": "a number",
}


def _problem(detail: ErrorDetails, model: type[BaseModel], root: str) -> str:
    kind, loc, got = detail["type"], detail["loc"], detail.get("input")
    where = _where(root, loc)
    ctx = detail.get("ctx") or {}
    if kind == "whole":
        return detail["msg"]
    if kind == "extra_forbidden":
        return _unknown_field(model, root, loc)
    if kind == "literal_error":
        choices = ", ".join(str(c) for c in _choices(model, loc))
        return f"{where} must be one of {choices}; got {got!r}"
    if kind == "missing":
        return f"{where} is required"
    if kind in _TYPES:
        hint = f' (quote it: "{got}")' if kind == "string_type" and isinstance(got, int | float) else ""
        return f"{where} must be {_TYPES[kind]}, got {got!r}{hint}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"{where} must be an object, got {type(got).__name__}"
    if kind == "list_type":
        return f"{where} must be a list, got {type(got).__name__}"
    if kind == "greater_than_equal":
        return f"{where} must be at least {ctx['ge']}, got {got!r}"
    if kind == "less_than_equal":
        return f"{where} must be at most {ctx['le']}, got {got!r}"
    if kind == "string_too_short":
        return f"{where} must not be empty"
    if kind == "value_error":
        problem = str(ctx["error"])
        return f"{where} {problem}" if problem.startswith("must") else f"{where}: {problem}"
    return f"{where}: {detail['msg']}"


def _unknown_field(model: type[BaseModel], root: str, loc: tuple[int | str, ...]) -> str:
    parent = _annotation_at(model, loc[:-1])
    fields = _field_names(parent)
    close = difflib.get_close_matches(str(loc[-1]), fields, n=1)
    suggestion = f" (did you mean {close[0]}?)" if close else ""
    owner = _where(root, loc[:-1]) or "the manifest"
    return f"{_where(root, loc)} is not a field of {owner}{suggestion}; its fields: {', '.join(fields)}"


def _field_names(annotation: Any) -> list[str]:
    if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return []
    return [field.alias or name for name, field in annotation.model_fields.items()]


def _choices(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[Any, ...]:
    annotation = _annotation_at(model, loc)
    return get_args(annotation) if get_origin(annotation) is Literal else ()


def _annotation_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> Any:
    """The type of the value at `loc` (aliases, keys and indexes) in `model`."""
    annotation: Any = model
    for segment in loc:
        annotation = _step(_unwrap(annotation), segment)
    return _unwrap(annotation)


def _step(annotation: Any, segment: int | str) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            if segment in (name, field.alias):
                return field.annotation
        return None
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (dict, Mapping) and len(args) == 2:
        return args[1]
    if origin is list and args:
        return args[0]
    return None


def _unwrap(annotation: Any) -> Any:
    """`X` of `Annotated[X, ...]` and of `X | None`."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            present = [a for a in get_args(annotation) if a is not type(None)]
            if len(present) != 1:
                return annotation
            annotation = present[0]
        else:
            return annotation
