"""Fixtures: one session-scoped bed of real Kafka clusters (local, east, west).

Set SYNCER_TESTBED_STATE=DIR to reuse a bed started with ``syncer testbed up`` (faster while
developing). If Kafka cannot start, every integration test errors with the reason: nothing
is skipped silently."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncer.testbed import ClusterSpec, Testbed
from tests.kafka_helpers import Daemon

CLUSTERS = ("local", "east", "west")


@pytest.fixture(scope="session")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    reuse = os.environ.get("SYNCER_TESTBED_STATE")
    if reuse:
        bed = Testbed.load(reuse)
        missing = [n for n in CLUSTERS if n not in bed.clusters or not bed.clusters[n].is_running()]
        if missing:
            raise RuntimeError(f"SYNCER_TESTBED_STATE={reuse}: clusters not running: {missing}")
        yield bed
        return
    bed = Testbed(tmp_path_factory.mktemp("testbed"))
    try:
        bed.up([ClusterSpec(name) for name in CLUSTERS])
        yield bed
    finally:
        bed.down()


@pytest.fixture(scope="session")
def local(testbed: Testbed) -> str:
    return testbed.clusters["local"].bootstrap


@pytest.fixture(scope="session")
def east(testbed: Testbed) -> str:
    return testbed.clusters["east"].bootstrap


@pytest.fixture(scope="session")
def west(testbed: Testbed) -> str:
    return testbed.clusters["west"].bootstrap


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses."""
    stem = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:60].strip("-")
    return f"t.{stem}.{uuid.uuid4().hex[:8]}"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return tmp_path / "syncer.yaml"


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    """`syncer run` processes a test starts; stopped after it."""
    started: list[Daemon] = []
    yield started
    for daemon in started:
        daemon.stop()
