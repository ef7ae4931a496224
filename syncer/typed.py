"""Plain values (parsed YAML) into frozen, typed dataclasses, every problem reported with its
path at once: ``${VAR}`` and ``${VAR:-default}`` replaced from the environment in every
string (``$${`` is a literal ``${``), unknown keys and missing (or empty) required ones
named, scalars checked against the field's type (a number may come as a string, through
``${VAR}``; a float must be finite), enums written as one of their words. A value found
wrong is left out, so the field keeps its default (a required one a blank of its type) and
the rules that span fields can still run over the rest: one pass reports every problem of a
file, whatever its kind. Knows nothing of syncer's settings."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from collections.abc import Callable
from enum import StrEnum
from typing import Any, TypeVar

_ENV = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_INT = re.compile(r"[+-]?[0-9]+")


def interpolate(value: Any, path: str, problems: list[str]) -> Any:
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            escaped, name, default = match.groups()
            if escaped:
                return match.group(0)[1:]  # $${...}: the text ${...} as it is
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            problems.append(f"{path or '<root>'}: environment variable {name} is not set")
            return ""

        return _ENV.sub(sub, value)
    if isinstance(value, dict):
        return {k: interpolate(v, _join(path, str(k)), problems) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


T = TypeVar("T")

# what _convert answers for a value it found wrong (and reported): the field is left out
_INVALID: Any = object()
# stand-ins for a required field that is missing, empty or wrong, so the object can be built
# and the cross-field rules still run; the problem is already reported at that path
_BLANKS: dict[Any, Any] = {str: "", int: 0, float: 0.0, bool: False}


def build(cls: type[T], raw: Any, path: str, problems: list[str]) -> T | None:
    """Build dataclass ``cls`` from a mapping, appending every problem found to ``problems``."""
    if not isinstance(raw, dict):
        problems.append(f"{path or '<root>'}: expected a mapping, got {_kind(raw)}")
        return None
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in raw:
        if key not in fields:
            problems.append(f"{_join(path, str(key))}: unknown key")
        elif fields[key].metadata.get("python_only"):
            problems.append(f"{_join(path, str(key))}: can only be set from Python")
    values: dict[str, Any] = {}
    for name, spec in fields.items():
        where = _join(path, name)
        required = (
            spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING
        )
        value = _INVALID
        if name not in raw or spec.metadata.get("python_only"):
            if required:
                problems.append(f"{where}: required")
        else:
            value = _convert(hints[name], raw[name], where, problems)
            if required and isinstance(value, str) and not value.strip():
                problems.append(f"{where}: required, got an empty value")
        if value is not _INVALID:
            values[name] = value
        elif required:
            values[name] = _blank(hints[name])
    try:
        return cls(**values)
    except TypeError:
        return None


def _blank(hint: Any) -> Any:
    """A stand-in for a required field of type ``hint`` that is missing or wrong."""
    if dataclasses.is_dataclass(hint):
        return build(hint, {}, "", [])  # type: ignore[arg-type]
    if typing.get_origin(hint) is tuple:
        return ()
    return _BLANKS.get(hint)


def first_per_path(problems: list[str]) -> list[str]:
    """``problems`` with only the first one said of each path: a value found wrong is also
    blank (or its default) to the rules that run after, which need not repeat it."""
    seen: set[str] = set()
    kept = []
    for problem in problems:
        where = problem.partition(": ")[0]
        if where not in seen:
            seen.add(where)
            kept.append(problem)
    return kept


def _convert(hint: Any, value: Any, path: str, problems: list[str]) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        built = build(hint, value, path, problems)  # type: ignore[arg-type]
        return _INVALID if built is None else built
    if origin is tuple:
        (item,) = typing.get_args(hint)[:1]
        if not isinstance(value, list):
            problems.append(f"{path}: expected a list, got {_kind(value)}")
            return _INVALID
        items = (_convert(item, v, f"{path}[{i}]", problems) for i, v in enumerate(value))
        return tuple(v for v in items if v is not _INVALID)
    if origin in (typing.Union, types.UnionType):
        return value
    return _scalar(hint, value, path, problems)


def _scalar(hint: Any, value: Any, path: str, problems: list[str]) -> Any:
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        return _choice(hint, value, path, problems)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, str) and _INT.fullmatch(value.strip()):
        return int(value)  # numbers that came through ${ENV}
    if hint is float and isinstance(value, str):
        value = _number(value)  # one that came through ${ENV}, or the string, refused below
    if hint is float and isinstance(value, float) and not math.isfinite(value):
        problems.append(f"{path}: expected a finite number, got {value}")
        return _INVALID
    if hint is bool and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    problems.append(f"{path}: expected {hint.__name__}, got {_kind(value)}")
    return _INVALID


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _choice(hint: type[StrEnum], value: Any, path: str, problems: list[str]) -> Any:
    """One of a fixed set of words (an enum's values), written in YAML as a string."""
    if not isinstance(value, str):
        problems.append(f"{path}: expected str, got {_kind(value)}")
        return _INVALID
    try:
        return hint(value)
    except ValueError:
        choices = " or ".join(repr(member.value) for member in hint)
        problems.append(f"{path}: must be {choices}, got {value!r}")
        return _INVALID


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
    }.get(type(value), type(value).__name__)


def unbuild(value: Any, leave_out: Callable[[object, str], bool] = lambda _s, _k: False) -> Any:
    """A dataclass as ``build`` takes it (mappings and lists), without the python-only fields
    and the ones ``leave_out(section, key)`` says (``Config.validate``)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: unbuild(getattr(value, f.name), leave_out)
            for f in dataclasses.fields(value)
            if not f.metadata.get("python_only") and not leave_out(value, f.name)
        }
    if isinstance(value, tuple | list):
        return [unbuild(v, leave_out) for v in value]
    return value


def keep_python_only(built: Any, original: Any) -> Any:
    """``built`` with ``original``'s python-only fields, at any depth (``unbuild`` drops them)."""
    if isinstance(built, tuple):
        return tuple(keep_python_only(b, o) for b, o in zip(built, original, strict=True))
    if not dataclasses.is_dataclass(built) or isinstance(built, type):
        return built
    changes = {
        f.name: getattr(original, f.name)
        if f.metadata.get("python_only")
        else keep_python_only(getattr(built, f.name), getattr(original, f.name))
        for f in dataclasses.fields(built)
    }
    return dataclasses.replace(built, **changes)
