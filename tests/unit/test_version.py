"""The distribution kafka-syncer: one version, printed by ``syncer --version``, and a
dependency list that covers what syncer/ imports.

The dev venv cannot catch an undeclared dependency by running (the dev extras install
plenty), so the last test reads the imports themselves; tests/integration/test_wheel.py
checks the same thing by installing the built wheel alone."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import syncer
from syncer.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def normalized(name: str) -> str:
    """PEP 503: PyYAML, pyyaml and py_yaml are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def third_party_imports(package: Path) -> set[str]:
    """Top-level names of absolute imports in ``package`` that are neither stdlib nor ours."""
    names: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"syncer", "__future__"}


def test_version_prints_ours_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--version"])
    assert exited.value.code == 0
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(
        rf"syncer {re.escape(syncer.__version__)} \(Python 3\.\S+, aiokafka \S+\)", line
    )


def test_the_version_lives_only_in_syncer_init() -> None:
    project = PYPROJECT["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "syncer.__version__"}
    assert str(Version(syncer.__version__)) == syncer.__version__  # PEP 440, canonical


def test_the_distribution_is_kafka_syncer_and_the_command_syncer() -> None:
    project = PYPROJECT["project"]
    assert project["name"] == "kafka-syncer"  # "syncer" on the index is someone else's
    assert project["scripts"] == {"syncer": "syncer.cli:main"}


def test_every_third_party_import_is_a_declared_dependency() -> None:
    declared = {normalized(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]}
    owners = importlib.metadata.packages_distributions()
    imported = third_party_imports(ROOT / "syncer")
    assert "yaml" in imported  # the walk sees imports at all
    undeclared = {
        module: owners.get(module, ["(not installed)"])
        for module in imported
        if not declared & {normalized(d) for d in owners.get(module, [])}
    }
    assert not undeclared, f"imported by syncer/ but not in [project] dependencies: {undeclared}"
