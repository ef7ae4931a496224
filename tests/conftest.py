"""Fixtures: one session-scoped bed of real Kafka clusters (local, east, west), one node
each, the fast default; and module-scoped 3-node clusters for tests of replicas, leader
moves and broker faults (``local3``, ``remote3``), each a bed of its own.

Set SYNCER_TESTBED_STATE=DIR to reuse a bed started with ``syncer testbed up`` (faster while
developing). If Kafka cannot start, every integration test errors with the reason: nothing
is skipped silently."""

from __future__ import annotations

import logging
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncer.testbed import ClusterSpec, KafkaJars, MultiNodeCluster, Testbed
from tests.kafka_helpers import Daemon

CLUSTERS = ("local", "east", "west")

log = logging.getLogger(__name__)


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
        bed.down(kill=True)  # throw-away data: no clean shutdown to wait for


@pytest.fixture(scope="session")
def local(testbed: Testbed) -> str:
    return testbed.clusters["local"].bootstrap


@pytest.fixture(scope="session")
def east(testbed: Testbed) -> str:
    return testbed.clusters["east"].bootstrap


@pytest.fixture(scope="session")
def west(testbed: Testbed) -> str:
    return testbed.clusters["west"].bootstrap


def three_nodes(root: Path, name: str, **settings: object) -> Iterator[Testbed]:
    """A bed of one 3-node cluster ``name`` (RF 3, min ISR 2, racks r0-r2, no periodic
    preferred election unless ``auto_leader_rebalance=True``), stopped after."""
    bed = Testbed(root, KafkaJars.default())
    started = time.monotonic()
    try:
        bed.up([ClusterSpec(name, nodes=3, **settings)])  # type: ignore[arg-type]
        log.warning("3-node cluster %s up in %.1f s", name, time.monotonic() - started)
        yield bed
    finally:
        bed.down(kill=True)  # throw-away data: no clean shutdown to wait for


@pytest.fixture(scope="module")
def local3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """A 3-node local cluster of the module's own: ``local3.multi("local3")``."""
    yield from three_nodes(tmp_path_factory.mktemp("local3"), "local3")


@pytest.fixture(scope="module")
def remote3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """A 3-node remote cluster of the module's own: ``remote3.multi("remote3")``."""
    yield from three_nodes(tmp_path_factory.mktemp("remote3"), "remote3")


def cluster_of(bed: Testbed) -> MultiNodeCluster:
    """The one 3-node cluster of a ``three_nodes`` bed."""
    (name,) = bed.clusters
    return bed.multi(name)


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
