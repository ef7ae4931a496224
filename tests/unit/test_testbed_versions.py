"""Older Kafka versions in the bed, without starting Java: a ZooKeeper-mode node's settings,
the jars and log configuration of each version, the --clusters flag's @VERSION, and the state
file keeping a cluster's version and its ZooKeeper."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from syncer.testbed import ClusterSpec, KafkaJars, RunningCluster, Testbed, TestbedError
from syncer.testbed.cli import parse_clusters, parse_versions
from syncer.testbed.jars import _pom, artifacts, has_zookeeper, uses_log4j1, version_key
from syncer.testbed.process import java_command, write_log1_config
from syncer.testbed.zookeeper import zookeeper_properties


def props_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def bed_at(tmp_path: Path) -> Testbed:
    return Testbed(tmp_path / "bed", jars=KafkaJars(tmp_path / "cache"))


def test_an_old_version_runs_one_zookeeper_mode_node(tmp_path: Path) -> None:
    bed = bed_at(tmp_path)
    cluster = bed._place(ClusterSpec("old", version="2.8.2"))
    assert isinstance(cluster, RunningCluster)
    assert cluster.version == "2.8.2"
    assert cluster.zookeeper_port is not None
    props = props_of(cluster.server_properties())
    assert props["zookeeper.connect"] == f"127.0.0.1:{cluster.zookeeper_port}"
    assert props["broker.id"] == "1"
    assert props["listeners"] == f"PLAINTEXT://127.0.0.1:{cluster.port}"
    assert props["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{cluster.port}"
    assert props["log.dirs"] == str(tmp_path / "bed" / "old" / "data")
    assert props["auto.create.topics.enable"] == "false"
    assert props["offsets.topic.replication.factor"] == "1"
    # nothing of KRaft: a 2.8 broker given process.roles would start in (early access) KRaft
    for kraft in ("process.roles", "node.id", "controller.quorum.voters"):
        assert kraft not in props
    assert not any(k.startswith("share.") for k in props)  # unknown to 2.8
    zk = cluster.zookeeper
    assert zk is not None and zk.directory == str(tmp_path / "bed" / "old" / "zookeeper")


def test_the_bed_version_stays_kraft(tmp_path: Path) -> None:
    bed = bed_at(tmp_path)
    for spec in (ClusterSpec("local"), ClusterSpec("new", version="4.0.0")):
        cluster = bed._place(spec)
        assert isinstance(cluster, RunningCluster)
        assert cluster.zookeeper is None
        assert props_of(cluster.server_properties())["process.roles"] == "broker,controller"


def test_spec_properties_override_a_zookeeper_node(tmp_path: Path) -> None:
    spec = ClusterSpec("old", version="2.8.2", properties={"log.cleaner.backoff.ms": "200"})
    cluster = bed_at(tmp_path)._place(spec)
    assert props_of(cluster.server_properties())["log.cleaner.backoff.ms"] == "200"


@pytest.mark.parametrize(
    "spec",
    [
        ClusterSpec("old", version="2.8.2", nodes=3),
        ClusterSpec("old", version="2.8.2", security="SSL"),
        ClusterSpec("old", version="2.8.2", advertised="127.0.0.1:1"),
    ],
)
def test_what_an_old_cluster_cannot_be_is_refused(tmp_path: Path, spec: ClusterSpec) -> None:
    with pytest.raises(TestbedError, match="old"):
        bed_at(tmp_path)._place(spec)


def test_the_state_file_keeps_version_and_zookeeper(tmp_path: Path) -> None:
    bed = bed_at(tmp_path)
    cluster = bed._place(ClusterSpec("old", version="2.8.2"))
    assert isinstance(cluster, RunningCluster)
    cluster.zookeeper_pid = 4242
    bed.clusters["old"] = cluster
    bed.save()
    again = Testbed.load(bed.state_dir).clusters["old"]
    assert isinstance(again, RunningCluster)
    assert (again.version, again.zookeeper_port) == ("2.8.2", cluster.zookeeper_port)
    assert again.zookeeper is not None and again.zookeeper.pid == 4242


def test_jars_per_version(tmp_path: Path) -> None:
    old = artifacts("2.8.2")
    assert ("org.apache.kafka", "kafka_2.13", "2.8.2") in old
    assert ("log4j", "log4j", "1.2.17") in old
    assert not any(a == "connect-mirror" for _, a, _ in old)  # a benchmark peer only for 4.x
    assert any(a == "connect-mirror" for _, a, _ in artifacts("4.1.1"))
    assert "<version>2.8.2</version>" in _pom("2.8.2")
    assert "4.1.1" not in _pom("2.8.2")
    assert KafkaJars(tmp_path, "2.8.2").home == tmp_path / "kafka-2.8.2"


def test_versions_compare_and_choose_zookeeper_and_log4j() -> None:
    assert version_key("2.8.2") < version_key("3.9.1") < version_key("4.1.1")
    assert version_key("2.10.0") > version_key("2.8.2")  # numerically, not as text
    assert has_zookeeper("2.8.2") and has_zookeeper("3.9.1") and not has_zookeeper("4.0.0")
    assert uses_log4j1("2.8.2") and not uses_log4j1("4.1.1")
    with pytest.raises(TestbedError, match="not a Kafka version"):
        version_key("latest")


def test_an_old_jvm_gets_a_log4j1_configuration(tmp_path: Path) -> None:
    old = java_command(KafkaJars(tmp_path, "2.8.2"), "/bed/old", "kafka.Kafka", "x")
    assert "-Dlog4j.configuration=file:/bed/old/log4j.properties" in old
    assert not any("log4j2" in arg for arg in old)
    new = java_command(KafkaJars(tmp_path, "4.1.1"), "/bed/new", "kafka.Kafka", "x")
    assert "-Dlog4j2.configurationFile=/bed/new/log4j2.properties" in new
    write_log1_config(KafkaJars(tmp_path, "2.8.2"), str(tmp_path / "old"))
    assert "ConsoleAppender" in (tmp_path / "old" / "log4j.properties").read_text()
    write_log1_config(KafkaJars(tmp_path, "4.1.1"), str(tmp_path / "new"))
    assert not (tmp_path / "new" / "log4j.properties").exists()


def test_a_node_runs_on_a_heap_fixed_at_its_size(tmp_path: Path) -> None:
    """Grown from a small start, the brokers' collections fell on a bed's first minutes."""
    cmd = java_command(KafkaJars(tmp_path, "4.1.1"), "/bed/n", "kafka.Kafka", heap="384m")
    assert "-Xmx384m" in cmd and "-Xms384m" in cmd
    assert [arg for arg in cmd if arg.startswith("-Xm")] == ["-Xmx384m", "-Xms384m"]


def test_zookeeper_listens_on_loopback_without_its_admin_server(tmp_path: Path) -> None:
    props = props_of(zookeeper_properties(tmp_path / "zk", 2181))
    assert props["clientPort"] == "2181"
    assert props["clientPortAddress"] == "127.0.0.1"
    assert props["dataDir"] == str(tmp_path / "zk")
    assert props["admin.enableServer"] == "false"  # else it takes port 8080
    assert "ruok" in props["4lw.commands.whitelist"]  # how the bed sees it is up


def test_the_clusters_flag_takes_a_version() -> None:
    text = "old@2.8.2,local:3,mid:1@3.9.1"
    assert parse_clusters(text) == [("old", 1), ("local", 3), ("mid", 1)]
    assert parse_versions(text) == {"old": "2.8.2", "mid": "3.9.1"}
    assert parse_versions("local,east") == {}
    for bad in ("old@", "old@2.8", "old@latest", "@2.8.2", "old@2.8.2,old"):
        with pytest.raises(SystemExit):
            parse_versions(bad)


def test_down_stops_the_zookeeper_too(tmp_path: Path) -> None:
    """A stand-in for ZooKeeper's JVM, marked with its directory as the bed marks it: the
    cluster's stop (what ``testbed down`` calls) ends it after the broker, which is gone."""
    bed = bed_at(tmp_path)
    cluster = bed._place(ClusterSpec("old", version="2.8.2"))
    assert isinstance(cluster, RunningCluster) and cluster.zookeeper is not None
    marker = f"-Dsyncer.testbed.dir={cluster.zookeeper.directory}"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker])
    try:
        cluster.zookeeper_pid = proc.pid
        for _ in range(50):  # until the exec shows
            if cluster.zookeeper.is_running():
                break
            time.sleep(0.05)
        assert cluster.zookeeper.is_running() and not cluster.is_running()
        bed.clusters["old"] = cluster
        bed.down()
        assert proc.wait(timeout=5) == -signal.SIGTERM
        assert cluster.zookeeper_pid is None
        again = Testbed.load(bed.state_dir).clusters["old"]
        assert isinstance(again, RunningCluster) and again.zookeeper_pid is None
    finally:
        proc.kill()
        proc.wait()
