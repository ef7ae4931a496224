"""Clusters of several nodes in the bed, without starting Java: what each node is told, what
the state file keeps, what the command line accepts, and what Kafka's tools are given."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from syncer import cli
from syncer.errors import ExitCode
from syncer.testbed import ClusterSpec, MultiNodeCluster, RunningCluster, Testbed, TestbedError, bed
from syncer.testbed.cli import parse_clusters
from syncer.testbed.jars import KafkaJars
from syncer.testbed.ops import parse_replicas
from syncer.testbed.process import is_our_java
from syncer.testbed.quorum import quorum_voters, rack_of, replication_properties
from syncer.testbed.tools import (
    election_json,
    parse_quorum_leader,
    reassignment_done,
    reassignment_json,
)


def props_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def bed_at(tmp_path: Path) -> Testbed:
    return Testbed(tmp_path / "bed", jars=KafkaJars(tmp_path / "cache", version="9.9.9"))


def test_three_nodes_replicate_to_three_and_need_two_in_sync() -> None:
    props = replication_properties(3)
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["auto.leader.rebalance.enable"] == "false"
    assert "leader.imbalance.check.interval.seconds" not in props


def test_replication_is_settable_and_checked_against_the_nodes() -> None:
    assert replication_properties(5)["default.replication.factor"] == "3"  # not all five
    two = replication_properties(3, replication_factor=2)
    assert (two["default.replication.factor"], two["min.insync.replicas"]) == ("2", "1")
    assert replication_properties(3, min_insync_replicas=3)["min.insync.replicas"] == "3"
    with pytest.raises(TestbedError, match="replication factor 4 does not fit a cluster of 3"):
        replication_properties(3, replication_factor=4)
    with pytest.raises(TestbedError, match=r"min\.insync\.replicas 3 does not fit replication"):
        replication_properties(3, replication_factor=2, min_insync_replicas=3)


def test_the_periodic_preferred_election_when_asked_runs_within_a_test() -> None:
    props = replication_properties(3, auto_leader_rebalance=True)
    assert props["auto.leader.rebalance.enable"] == "true"
    assert int(props["leader.imbalance.check.interval.seconds"]) <= 10


def test_voters_and_racks() -> None:
    assert quorum_voters({2: 9002, 1: 9001, 3: 9003}) == (
        "1@127.0.0.1:9001,2@127.0.0.1:9002,3@127.0.0.1:9003"
    )
    assert [rack_of(i) for i in (1, 2, 3)] == ["r0", "r1", "r2"]


def test_each_node_of_a_three_node_cluster_is_one_voter_of_the_same_quorum(
    tmp_path: Path,
) -> None:
    cluster = bed_at(tmp_path)._place(ClusterSpec("local", nodes=3, port=19000))
    assert isinstance(cluster, MultiNodeCluster)
    assert cluster.bootstrap == "127.0.0.1:19000,127.0.0.1:19001,127.0.0.1:19002"
    assert (cluster.replication_factor, cluster.min_insync_replicas) == (3, 2)
    nodes = [props_of(m.server_properties()) for m in cluster.members]
    assert [n["node.id"] for n in nodes] == ["1", "2", "3"]
    assert [n["broker.rack"] for n in nodes] == ["r0", "r1", "r2"]
    assert len({n["controller.quorum.voters"] for n in nodes}) == 1
    voters = nodes[0]["controller.quorum.voters"].split(",")
    assert [v.split("@")[0] for v in voters] == ["1", "2", "3"]
    assert [n["listeners"].split(",")[0] for n in nodes] == [
        f"PLAINTEXT://127.0.0.1:{p}" for p in (19000, 19001, 19002)
    ]
    assert all(n["min.insync.replicas"] == "2" for n in nodes)
    assert len({m.directory for m in cluster.members}) == 3
    assert len({m.cluster_id for m in cluster.members}) == 1  # one cluster, formatted alike
    assert all(m.heap == "384m" for m in cluster.members)


def test_the_one_node_cluster_is_as_it_was(tmp_path: Path) -> None:
    cluster = bed_at(tmp_path)._place(ClusterSpec("east", port=19100, controller_port=19101))
    assert isinstance(cluster, RunningCluster)
    props = props_of(cluster.server_properties())
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19101"
    assert props["offsets.topic.replication.factor"] == "1"
    for absent in ("broker.rack", "default.replication.factor", "min.insync.replicas"):
        assert absent not in props
    assert cluster.heap == "512m" and cluster.cluster_id is None
    assert cluster.members == [cluster]


def test_a_proxy_or_a_secured_listener_needs_one_node(tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match="needs nodes=1"):
        bed_at(tmp_path)._place(ClusterSpec("x", nodes=3, security="SSL"))


def test_the_state_file_keeps_a_cluster_of_several_nodes(tmp_path: Path) -> None:
    bed = bed_at(tmp_path)
    bed.clusters["local"] = bed._place(ClusterSpec("local", nodes=3, replication_factor=2))
    bed.clusters["west"] = bed._place(ClusterSpec("west"))
    bed.save()
    again = Testbed.load(bed.state_dir)
    assert again.clusters == bed.clusters
    assert isinstance(again.clusters["local"], MultiNodeCluster)
    assert isinstance(again.clusters["west"], RunningCluster)
    assert again.multi("local").node(2).rack == "r1"


def test_one_node_is_asked_of_a_cluster_that_has_it(tmp_path: Path) -> None:
    bed = bed_at(tmp_path)
    bed.clusters["local"] = bed._place(ClusterSpec("local", nodes=3))
    bed.clusters["west"] = bed._place(ClusterSpec("west"))
    with pytest.raises(TestbedError, match=r"cluster 'local' has no node 4 \(nodes: 1, 2, 3\)"):
        bed.kill_node("local", 4)
    with pytest.raises(TestbedError, match="cluster 'west' has one node"):
        bed.stop_node("west", 1)
    with pytest.raises(TestbedError, match="no cluster 'north'"):
        bed.start_node("north", 1)


def test_a_node_directory_is_not_mistaken_for_another(tmp_path: Path) -> None:
    """The JVM is found by its directory argument whole: /bed/local is not /bed/local2."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "-Dsyncer.testbed.dir=/bed/local2"]
    )
    try:
        for _ in range(50):  # until the exec shows
            if is_our_java(proc.pid, "/bed/local2"):
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert is_our_java(proc.pid, "/bed/local2")
        assert not is_our_java(proc.pid, "/bed/local")
    finally:
        proc.kill()
        proc.wait()


def test_the_clusters_flag_takes_a_node_count() -> None:
    assert parse_clusters("local:3,east:3,west") == [("local", 3), ("east", 3), ("west", 1)]
    assert parse_clusters(" a , b:1 ") == [("a", 1), ("b", 1)]
    for bad in ("a:0", "a:x", "a:", ":3", "a,a:3", ""):
        with pytest.raises(SystemExit):
            parse_clusters(bad)


def test_replicas_flag() -> None:
    assert parse_replicas("3,2,1") == [3, 2, 1]
    for bad in ("3,3", "x", ""):
        with pytest.raises(SystemExit):
            parse_replicas(bad)


def test_a_node_verb_on_a_one_node_cluster_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bed = bed_at(tmp_path)
    bed.clusters["west"] = bed._place(ClusterSpec("west"))
    bed.save()
    code = cli.main(["testbed", "node", "kill", "west", "1", "--state", str(bed.state_dir)])
    assert code == ExitCode.TESTBED
    assert (
        capsys.readouterr().err == "syncer: cluster 'west' has one node: stop or start it whole\n"
    )


def test_what_kafkas_tools_are_given() -> None:
    assert json.loads(election_json([("t", 0), ("t", 2)])) == {
        "partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 2}]
    }
    assert json.loads(reassignment_json({("t", 1): [3, 2]})) == {
        "version": 1,
        "partitions": [{"topic": "t", "partition": 1, "replicas": [3, 2]}],
    }


def test_a_reassignment_is_done_when_every_partition_says_so() -> None:
    done = "Status of partition reassignment:\nReassignment of partition t-0 is completed.\n"
    going = done + "Reassignment of partition t-1 is still in progress.\n"
    assert reassignment_done(done)
    assert not reassignment_done(going)
    assert not reassignment_done("Status of partition reassignment:\n")


def test_the_active_controller_is_the_quorum_reports_leader() -> None:
    report = (
        "ClusterId:              q1\nLeaderId:               2\nLeaderEpoch:            4\n"
        'HighWatermark:          311\nCurrentVoters:          [{"id": 1}, {"id": 2}]\n'
    )
    assert parse_quorum_leader(report) == 2
    with pytest.raises(TestbedError, match="named no leader"):
        parse_quorum_leader("ClusterId: q1\n")


def test_free_ports_are_never_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    # the kernel gave one port to two binds in a row: two nodes of one cluster got it
    ports = iter([41001, 41001, 41002])

    class Socket:
        def __init__(self, *args: object) -> None:
            self.port = next(ports)

        def __enter__(self) -> Socket:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def bind(self, address: object) -> None:
            pass

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(bed, "socket", SimpleNamespace(AF_INET=0, SOCK_STREAM=0, socket=Socket))
    # none handed out before in this test: the process's own (the kernel's picks for the
    # tests before) once held 41002, and this test ran out of ports (a CI rehearsal)
    monkeypatch.setattr(bed, "_HANDED_OUT", set())
    assert [bed.free_port(), bed.free_port()] == [41001, 41002]
