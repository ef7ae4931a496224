"""The version matrix, Kafka 3.9 as the remote: a 3.9.2 cluster in ZooKeeper mode (how most
clusters still to be migrated run) and one in KRaft mode, each copied into the session's
Kafka 4.1 local cluster, then read on both sides offset by offset (consumer, kcat) and judged
by ``syncer verify``. Both 3.9 clusters start together, once for the module."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncer.status import State
from syncer.testbed import ClusterSpec, KafkaJars, RunningCluster, Testbed
from tests.kafka_helpers import catch_up, make_config, own_bed
from tests.matrix.pairing import (
    PER_ROUND,
    ROUNDS,
    assert_identical,
    topics_of,
    verify,
    write_data_set,
)

log = logging.getLogger(__name__)

VERSION = "3.9.2"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """One 3.9.2 cluster in ZooKeeper mode (the default before 4.0) and one in KRaft mode."""
    started = time.monotonic()
    specs = [
        ClusterSpec("zookeeper", version=VERSION),
        ClusterSpec("kraft", version=VERSION, mode="kraft"),
    ]
    with own_bed(tmp_path_factory.mktemp("v39"), KafkaJars.default(), specs) as bed:
        log.warning("Kafka %s, both modes, up in %.1f s", VERSION, time.monotonic() - started)
        yield bed


def where_metadata_lives(cluster: RunningCluster) -> str:
    """The broker's own evidence of its mode: a KRaft node keeps the metadata log on disk and
    logs as a KafkaRaftServer; a ZooKeeper-mode broker has neither."""
    log_text = cluster.log_path.read_text()
    assert f"Kafka version: {VERSION}" in log_text
    raft = (Path(cluster.directory) / "data" / "__cluster_metadata-0").is_dir()
    assert raft == ("KafkaRaftServer" in log_text)
    return "kraft" if raft else "zookeeper"


@pytest.mark.parametrize("mode", ["zookeeper", "kraft"])
async def test_a_3_9_remote_copies_into_4_1_offset_by_offset(
    bed: Testbed, mode: str, local: str, topic: str, tmp_path: Path
) -> None:
    remote = bed.clusters[mode]
    assert isinstance(remote, RunningCluster)
    assert remote.mode == mode and where_metadata_lives(remote) == mode
    started = time.monotonic()
    written = await write_data_set(remote.bootstrap, topic)
    log.warning("%s: written %s in %.1f s", mode, written, time.monotonic() - started)

    copy_started = time.monotonic()
    config = make_config(local, {mode: remote.bootstrap}, list(topics_of(topic)))
    syncer = await catch_up(config)
    copy_s = time.monotonic() - copy_started
    statuses = list(syncer.statuses())
    per_partition = ROUNDS * PER_ROUND
    assert len(statuses) == 6, statuses
    assert all(
        s.state is State.CAUGHT_UP and s.local_end == s.remote_end == per_partition
        for s in statuses
    ), [(s.tp, s.state, s.local_end, s.remote_end, s.error) for s in statuses]
    compared = await assert_identical(local, remote.bootstrap, topic)
    assert compared == sum(written.values())
    verify(tmp_path, local, (mode, remote.bootstrap), topic)
    log.warning(
        "%s %s → 4.1: %d records copied in %.1f s, identical (consumer, kcat, verify)",
        VERSION,
        mode,
        compared,
        copy_s,
    )
