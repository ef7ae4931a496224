"""Where a cluster of the bed keeps its metadata (ZooKeeper or KRaft), without starting Java:
the rule per version, what a 3.9 KRaft node is given, the --clusters flag's /MODE and the
state file keeping the mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncer.testbed import ClusterSpec, KafkaJars, RunningCluster, Testbed, TestbedError
from syncer.testbed.cli import parse_clusters, parse_modes, parse_versions
from syncer.testbed.node import cluster_mode, has_share_groups


def props_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def bed_at(tmp_path: Path) -> Testbed:
    return Testbed(tmp_path / "bed", jars=KafkaJars(tmp_path / "cache"))


@pytest.mark.parametrize(
    ("version", "mode", "chosen"),
    [
        (None, None, "kraft"),  # the bed's own 4.1
        ("4.0.0", None, "kraft"),
        ("3.9.2", None, "zookeeper"),  # before 4.0 the default stays ZooKeeper
        ("2.8.2", None, "zookeeper"),
        ("3.9.2", "kraft", "kraft"),
        ("3.3.0", "kraft", "kraft"),  # the first production KRaft
        ("3.9.2", "zookeeper", "zookeeper"),
        ("4.1.1", "kraft", "kraft"),
        (None, "kraft", "kraft"),
    ],
)
def test_the_mode_of_each_version(version: str | None, mode: str | None, chosen: str) -> None:
    assert cluster_mode(version, mode) == chosen


@pytest.mark.parametrize(
    ("version", "mode", "why"),
    [
        ("3.2.3", "kraft", "no production KRaft"),
        ("2.8.2", "kraft", "no production KRaft"),
        ("4.0.0", "zookeeper", "no ZooKeeper mode"),
        (None, "zookeeper", "no ZooKeeper mode"),
        ("3.9.2", "raft", "no such cluster mode"),
    ],
)
def test_a_mode_the_version_lacks_is_refused(version: str | None, mode: str, why: str) -> None:
    with pytest.raises(TestbedError, match=why):
        cluster_mode(version, mode)


def test_placing_refuses_an_impossible_mode_with_the_cluster_named(tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match=r"cluster 'old': Kafka 2\.8\.2 has no production"):
        bed_at(tmp_path)._place(ClusterSpec("old", version="2.8.2", mode="kraft"))
    with pytest.raises(TestbedError, match=r"cluster 'new': .* no ZooKeeper mode"):
        bed_at(tmp_path)._place(ClusterSpec("new", mode="zookeeper"))


def test_a_3_9_kraft_node_is_a_kraft_node_without_the_share_coordinator(
    tmp_path: Path,
) -> None:
    cluster = bed_at(tmp_path)._place(ClusterSpec("mid", version="3.9.2", mode="kraft"))
    assert isinstance(cluster, RunningCluster)
    assert cluster.mode == "kraft" and cluster.zookeeper is None
    props = props_of(cluster.server_properties())
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == f"1@127.0.0.1:{cluster.controller_port}"
    assert "zookeeper.connect" not in props
    assert not any(k.startswith("share.") for k in props)  # unknown to 3.9
    assert has_share_groups(None) and has_share_groups("4.0.0")
    assert not has_share_groups("3.9.2")
    # the bed's own version keeps them
    own = props_of(bed_at(tmp_path)._place(ClusterSpec("local")).server_properties())
    assert own["share.coordinator.state.topic.replication.factor"] == "1"


@pytest.mark.parametrize("spec", [ClusterSpec("local"), ClusterSpec("old", version="2.8.2")])
def test_a_node_keeps_records_of_any_age_unless_a_topic_sets_retention(
    tmp_path: Path, spec: ClusterSpec
) -> None:
    """Tests stamp records years back (1_700_000_000_000): with the broker's default week of
    time retention, its check emptied such a log within a test (on a real broker, a log of
    20 such records went to start 20 = end within 40 s of a 2 s check interval)."""
    cluster = bed_at(tmp_path)._place(spec)
    assert isinstance(cluster, RunningCluster)
    assert props_of(cluster.server_properties())["log.retention.ms"] == "-1"


def test_the_default_for_3_9_stays_zookeeper(tmp_path: Path) -> None:
    """``ClusterSpec(name, version="3.9.2")`` (the migration runbook's call) is ZooKeeper."""
    cluster = bed_at(tmp_path)._place(ClusterSpec("old", version="3.9.2"))
    assert isinstance(cluster, RunningCluster)
    assert cluster.mode == "zookeeper" and cluster.zookeeper is not None
    assert "zookeeper.connect" in props_of(cluster.server_properties())


def test_the_state_file_keeps_the_mode(tmp_path: Path) -> None:
    bed = bed_at(tmp_path)
    for spec in (
        ClusterSpec("zk", version="3.9.2"),
        ClusterSpec("kraft", version="3.9.2", mode="kraft"),
    ):
        bed.clusters[spec.name] = bed._place(spec)
    bed.save()
    again = Testbed.load(bed.state_dir).clusters
    assert {n: getattr(c, "mode", None) for n, c in again.items()} == {
        "zk": "zookeeper",
        "kraft": "kraft",
    }


def test_a_state_file_from_before_modes_reads_zookeeper_from_its_port() -> None:
    old = RunningCluster("old", 1, 0, "127.0.0.1:1", "/bed/old", version="2.8.2", zookeeper_port=2)
    assert old.mode == "zookeeper"
    assert RunningCluster("new", 1, 2, "127.0.0.1:1", "/bed/new").mode == "kraft"


def test_the_clusters_flag_takes_a_mode() -> None:
    text = "old@3.9.2,mid@3.9.2/kraft,local:3,zk@2.8.2/zookeeper"
    assert parse_clusters(text) == [("old", 1), ("mid", 1), ("local", 3), ("zk", 1)]
    assert parse_versions(text) == {"old": "3.9.2", "mid": "3.9.2", "zk": "2.8.2"}
    assert parse_modes(text) == {"mid": "kraft", "zk": "zookeeper"}
    assert parse_modes("local,east") == {}
    for bad in ("mid@3.9.2/", "mid@3.9.2/raft", "mid@3.9.2/KRaft", "/kraft", "mid@3.9/kraft"):
        with pytest.raises(SystemExit):
            parse_modes(bad)


def test_testbed_up_help_names_the_modes() -> None:
    import argparse

    from syncer.testbed.cli import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    up = parser.parse_args(["testbed", "up", "--clusters", "mid@3.9.2/kraft", "--state", "x"])
    assert up.clusters == "mid@3.9.2/kraft"
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    testbed = verbs.choices["testbed"]
    up_parser = next(
        a for a in testbed._actions if isinstance(a, argparse._SubParsersAction)
    ).choices["up"]
    assert "/kraft" in up_parser.format_help() and "/zookeeper" in up_parser.format_help()
