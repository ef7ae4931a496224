"""The test bed says in one line what is missing, and finds its clusters again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from syncer.errors import ExitCode
from syncer.testbed import RunningCluster, Testbed
from syncer.testbed.errors import TestbedError
from syncer.testbed.jars import KafkaJars


def test_missing_java_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    with pytest.raises(TestbedError) as caught:
        KafkaJars(tmp_path / "cache").ensure()
    assert str(caught.value) == (
        "java not found on PATH: install a Java 17+ runtime (Debian: openjdk-17-jre-headless)"
    )
    assert caught.value.exit_code == ExitCode.TESTBED


def test_missing_maven_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "java").write_text("#!/bin/sh\n")
    (tmp_path / "java").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TestbedError, match=r"^mvn not found on PATH: install Apache Maven"):
        KafkaJars(tmp_path / "cache").ensure()


def test_a_failed_download_names_the_maven_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for tool, body in (("java", "exit 0"), ("mvn", "echo 'Could not resolve' ; exit 1")):
        (tmp_path / tool).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    jars = KafkaJars(tmp_path / "cache", version="9.9.9")
    with pytest.raises(TestbedError) as caught:
        jars.ensure()
    assert str(caught.value) == (
        f"downloading Kafka 9.9.9 jars with mvn failed (exit 1); see {jars.home / 'mvn.log'}"
    )
    assert not jars.is_complete()


def test_a_node_that_is_not_running_fails_its_wait_at_once(tmp_path: Path) -> None:
    node = RunningCluster("east", 1, 2, "127.0.0.1:1", str(tmp_path / "east"))
    with pytest.raises(TestbedError, match=r"^Kafka cluster 'east' exited while starting; see "):
        node.wait_ready(timeout=30)


def test_a_pid_that_is_not_our_jvm_is_not_a_running_cluster(tmp_path: Path) -> None:
    node = RunningCluster("east", 1, 2, "127.0.0.1:1", str(tmp_path / "east"), pid=os.getpid())
    assert not node.is_running()
    node.stop()  # nothing to stop: it must not signal this (test) process
    assert node.pid is None


def test_the_state_file_finds_the_clusters_again(tmp_path: Path) -> None:
    bed = Testbed(tmp_path, jars=KafkaJars(tmp_path / "cache", version="9.9.9"))
    bed.clusters["east"] = RunningCluster(
        "east", 9092, 9093, "127.0.0.1:19092", str(tmp_path / "east"), direct_port=9094
    )
    bed.save()
    again = Testbed.open(tmp_path)
    assert again.clusters == bed.clusters and again.jars.version == "9.9.9"
    assert again.clusters["east"].direct == "127.0.0.1:9094"
    assert "DIRECT://127.0.0.1:9094" in again.clusters["east"].server_properties()
