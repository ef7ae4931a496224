"""The bed's class-data archive: trained once, then mapped by every JVM on its class path;
a failed training leaves the JVMs as they were (plain values, a stand-in for the broker)."""

from __future__ import annotations

from pathlib import Path

from syncer.testbed import cds
from syncer.testbed.jars import KafkaJars
from syncer.testbed.process import java_command


def writes_archive(calls: list[Path]):  # type: ignore[no-untyped-def]
    def train(directory: Path, dump: Path) -> None:
        assert directory.is_dir()
        calls.append(dump)
        dump.write_bytes(b"archive")

    return train


def test_the_first_bed_trains_the_archive_and_every_later_jvm_maps_it(tmp_path: Path) -> None:
    jars = KafkaJars(tmp_path, "4.1.1")
    assert java_command(jars, "/bed/x", "kafka.Kafka")[:2] == ["java", "-Xmx512m"]
    calls: list[Path] = []
    cds.ensure(jars, writes_archive(calls))
    cds.ensure(jars, writes_archive(calls))  # trained once
    archive = cds.archive_path(jars)
    assert archive is not None and archive.read_bytes() == b"archive"
    assert len(calls) == 1 and not calls[0].exists()  # the partial dump moved into place
    assert java_command(jars, "/bed/x", "kafka.Kafka")[:2] == [
        "java",
        f"-XX:SharedArchiveFile={archive}",
    ]


def test_a_failed_training_is_not_retried_and_the_jvms_start_as_before(tmp_path: Path) -> None:
    jars = KafkaJars(tmp_path, "4.1.1")
    calls: list[Path] = []

    def fails(directory: Path, dump: Path) -> None:
        calls.append(dump)
        raise RuntimeError("port taken")

    cds.ensure(jars, fails)  # does not raise
    cds.ensure(jars, fails)
    assert len(calls) == 1
    archive = cds.archive_path(jars)
    assert archive is not None and not archive.exists()
    assert "port taken" in archive.with_suffix(".failed").read_text()
    assert cds.java(jars) == ["java"]


def test_a_training_that_writes_nothing_counts_as_failed(tmp_path: Path) -> None:
    jars = KafkaJars(tmp_path, "4.1.1")
    cds.ensure(jars, lambda directory, dump: None)
    assert cds.java(jars) == ["java"]
    archive = cds.archive_path(jars)
    assert archive is not None
    assert "no archive" in archive.with_suffix(".failed").read_text()


def test_zookeeper_only_versions_are_not_trained(tmp_path: Path) -> None:
    calls: list[Path] = []
    cds.ensure(KafkaJars(tmp_path, "2.8.2"), writes_archive(calls))
    assert calls == []
