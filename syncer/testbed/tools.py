"""Kafka's own command-line tools from the cached jars: fast, independent load generators."""

from __future__ import annotations

import subprocess

from syncer.testbed.errors import TestbedError
from syncer.testbed.jars import KafkaJars


def perf_produce(
    bootstrap: str,
    topic: str,
    *,
    records: int,
    record_size: int,
    jars: KafkaJars | None = None,
    producer_props: dict[str, str] | None = None,
    throughput: int = -1,
) -> str:
    """Write ``records`` records of ``record_size`` bytes with kafka-producer-perf-test;
    returns its last line of figures."""
    cmd = perf_produce_command(
        bootstrap,
        topic,
        records=records,
        record_size=record_size,
        jars=jars,
        producer_props=producer_props,
        throughput=throughput,
    )
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["?"]
        raise TestbedError(f"kafka-producer-perf-test failed: {tail[0]}")
    lines = [ln for ln in result.stdout.splitlines() if "records sent" in ln]
    return lines[-1] if lines else ""


def perf_consume_command(
    bootstrap: str, topic: str, *, records: int, jars: KafkaJars | None = None
) -> list[str]:
    """kafka-consumer-perf-test reading ``records`` records of ``topic`` from the start."""
    jars = (jars or KafkaJars.default()).ensure()
    return [
        "java",
        "-Xmx512m",
        "-cp",
        jars.classpath,
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(records),
        "--timeout",
        "120000",
    ]


def perf_produce_command(
    bootstrap: str,
    topic: str,
    *,
    records: int,
    record_size: int,
    jars: KafkaJars | None = None,
    producer_props: dict[str, str] | None = None,
    throughput: int = -1,
) -> list[str]:
    """The kafka-producer-perf-test command line ``perf_produce`` runs."""
    jars = (jars or KafkaJars.default()).ensure()
    props = {
        "bootstrap.servers": bootstrap,
        "acks": "1",
        "linger.ms": "5",
        "batch.size": "65536",
        **(producer_props or {}),
    }
    return [
        "java",
        "-Xmx512m",
        "-cp",
        jars.classpath,
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(record_size),
        "--throughput",
        str(throughput),
        "--producer-props",
        *[f"{k}={v}" for k, v in props.items()],
    ]


def add_acl(bootstrap: str, *args: str, jars: KafkaJars | None = None) -> None:
    """kafka-acls --add with ``args`` (e.g. ``--deny-principal User:x --operation Write
    --topic t``), through a listener whose principal may change ACLs (the bed's direct one)."""
    jars = (jars or KafkaJars.default()).ensure()
    cmd = [
        "java",
        "-Xmx256m",
        "-cp",
        jars.classpath,
        "org.apache.kafka.tools.AclCommand",
        "--bootstrap-server",
        bootstrap,
        "--add",
        "--force",
        *args,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["?"]
        raise TestbedError(f"kafka-acls failed: {tail[0]}")
