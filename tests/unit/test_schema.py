"""The JSON Schema of the configuration, and the reference in the README, both checked
against the config classes: a key added without its documentation fails here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from syncer.schema import config_schema, key_paths

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def reference_rows() -> list[str]:
    """The first cell of every row of the README's configuration reference."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Configuration reference", 1)[1].split("\n### ", 1)[0]
    return [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]


def documented(path: str, rows: list[str]) -> bool:
    """A key is documented by a row naming it whole (``copier.max_chunks``), or, for the
    settings every cluster has, by its name after ``local.``, ``remotes[].`` or a bare dot
    (``.request_timeout_ms``) or alone (``security_protocol`` (`local`, `remotes[]`))."""
    leaf = path.rsplit(".", 1)[-1]
    cluster = path.startswith(("local.", "remotes[]."))
    for row in rows:
        names = re.findall(r"`([^`]+)`", row)
        if path in names:
            return True
        if cluster and any(n in (leaf, "." + leaf) or n.endswith("." + leaf) for n in names):
            return True
        if cluster and any(n.split(" / ")[0] == leaf for n in names):
            return True
    return False


def test_every_key_is_in_the_readmes_configuration_reference() -> None:
    rows = reference_rows()
    assert len(rows) > 30
    missing = [path for path in key_paths() if not documented(path, rows)]
    assert missing == []


def test_a_key_missing_from_the_reference_is_caught() -> None:
    """The check itself can fail: drop one row and its key is reported."""
    rows = [r for r in reference_rows() if "sync_configs" not in r]
    assert not documented("topics.sync_configs", rows)


def test_the_schema_knows_every_key_and_refuses_others() -> None:
    schema = config_schema()
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["local", "remotes", "topics"]
    remote = schema["properties"]["remotes"]["items"]
    assert remote["required"] == ["bootstrap_servers"]
    assert remote["additionalProperties"] is False
    assert "sasl_oauth_token_provider" not in remote["properties"]  # set from Python only
    assert schema["properties"]["topics"]["properties"]["on_hole"] == {
        "type": "string",
        "enum": ["halt", "fill"],
        "default": "halt",
    }
    assert remote["properties"]["client_rack"]["anyOf"][-1] == {"type": "null"}


def conforms(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """What of ``value`` the schema does not allow (the parts of JSON Schema it uses)."""
    if "anyOf" in schema:
        if all(conforms(value, s, path) for s in schema["anyOf"]):
            return [f"{path}: matches none of anyOf"]
        return []
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds or []
    python = {
        "string": str,
        "integer": int,
        "number": (int, float),
        "boolean": bool,
        "object": dict,
        "array": list,
        "null": type(None),
    }
    if kinds and not any(isinstance(value, python[k]) for k in kinds):
        return [f"{path}: {value!r} is not {kinds}"]
    problems = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in schema.get("properties", {}):
                problems.append(f"{path}.{key}: not allowed")
            else:
                problems += conforms(item, schema["properties"][key], f"{path}.{key}")
        problems += [f"{path}.{k}: required" for k in schema.get("required", []) if k not in value]
    if isinstance(value, list):
        for i, item in enumerate(value):
            problems += conforms(item, schema.get("items", {}), f"{path}[{i}]")
    return problems


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_examples_conform_to_the_schema(example: Path) -> None:
    assert conforms(yaml.safe_load(example.read_text()), config_schema()) == []


def test_the_schema_refuses_what_the_loader_refuses() -> None:
    bad = {"local": {"bootstrap_servers": "a:1", "colour": "blue"}, "remotes": [{}], "topics": {}}
    assert conforms(bad, config_schema()) == [
        ".local.colour: not allowed",
        ".remotes[0].bootstrap_servers: required",
    ]


def test_syncer_config_schema_prints_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "syncer", "config", "schema"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(out.stdout) == config_schema()
