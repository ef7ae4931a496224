"""A JSON Schema of the YAML configuration, made from the config classes themselves, so it
cannot drift from what ``Config.from_dict`` accepts: ``syncer config schema`` prints it for
editors (VS Code's YAML extension, JetBrains) to complete and check configuration files.

What a schema can say is said (types, enum words, required keys, unknown keys refused,
defaults, and each key's meaning from ``syncer.config_docs`` as its description, which
editors show on hover); the rules that span fields (a regex that compiles, lease between
heartbeat and session) stay with ``syncer.config``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import types
import typing
from enum import StrEnum
from typing import Any

from syncer.config import Config
from syncer.config_docs import MEANINGS, Meanings, meaning
from syncer.reference import reference_markdown

SCHEMA_URI = "https://json-schema.org/draft/2020-12/schema"
_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def config_schema(meanings: Meanings = MEANINGS) -> dict[str, Any]:
    """The schema of a whole configuration file."""
    schema = _object(Config, meanings)
    return {"$schema": SCHEMA_URI, "title": "syncer configuration", **schema}


def key_paths(cls: type[Any] = Config, prefix: str = "") -> list[str]:
    """Every key a file may set, as the reference names it (``remotes[].connections``)."""
    paths = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("python_only"):
            continue
        path, hint = prefix + f.name, hints[f.name]
        item = _tuple_item(hint)
        if dataclasses.is_dataclass(hint):
            paths += key_paths(hint, path + ".")  # type: ignore[arg-type]
        elif item is not None and dataclasses.is_dataclass(item):
            paths += key_paths(item, path + "[].")  # type: ignore[arg-type]
        else:
            paths.append(path)
    return paths


def _object(cls: type[Any], meanings: Meanings) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    properties: dict[str, Any] = {}
    required = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("python_only"):
            continue
        properties[f.name] = _type(hints[f.name], meanings)
        text = meaning(cls, f.name, meanings)
        if text is not None:
            properties[f.name]["description"] = text
        if f.default is not dataclasses.MISSING:
            default = f.default
            properties[f.name]["default"] = (
                default.value
                if isinstance(default, StrEnum)
                else (list(default) if isinstance(default, tuple) else default)
            )
        elif f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    out: dict[str, Any] = {"type": "object", "properties": properties}
    out["additionalProperties"] = False  # unknown keys are errors (typed.build)
    if required:
        out["required"] = required
    if cls.__doc__:
        out["description"] = " ".join(cls.__doc__.split())
    return out


def _type(hint: Any, meanings: Meanings) -> dict[str, Any]:
    if dataclasses.is_dataclass(hint):
        return _object(hint, meanings)  # type: ignore[arg-type]
    item = _tuple_item(hint)
    if item is not None:
        return {"type": "array", "items": _type(item, meanings)}
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        kinds = [_type(arg, meanings) for arg in typing.get_args(hint) if arg is not type(None)]
        return {"anyOf": [*kinds, {"type": "null"}]}
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        return {"type": "string", "enum": [member.value for member in hint]}
    if hint in _SCALARS:
        # ${VAR} may stand for any scalar: a number or a boolean may come as a string
        kind = _SCALARS[hint]
        return {"type": kind} if kind == "string" else {"type": [kind, "string"]}
    return {}


def _tuple_item(hint: Any) -> Any:
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0]
    return None


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``syncer config schema`` and ``syncer config reference``."""
    parser = sub.add_parser("config", help="about the configuration file")
    verbs = parser.add_subparsers(dest="verb", required=True)
    schema = verbs.add_parser("schema", help="print a JSON Schema of the YAML, for editors")
    schema.set_defaults(func=_print_schema)
    reference = verbs.add_parser(
        "reference", help="print the configuration reference (Markdown, docs/reference.md)"
    )
    reference.set_defaults(func=_print_reference)


def _print_schema(args: argparse.Namespace) -> int:
    print(json.dumps(config_schema(), indent=2))
    return 0


def _print_reference(args: argparse.Namespace) -> int:
    sys.stdout.write(reference_markdown())  # exactly the page: `> docs/reference.md`
    return 0
