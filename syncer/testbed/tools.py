"""Kafka's own command-line tools from the cached jars: fast, independent load generators,
and the admin tools an operator moves leaders with (preferred election, reassignment)."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence

from syncer.testbed import cds
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
        *cds.java(jars),
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
        *cds.java(jars),
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
        *cds.java(jars),
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


def tool_command(jars: KafkaJars, main: str, *args: str) -> list[str]:
    """One of Kafka's admin tools (its main class) from the cached jars, with a small heap."""
    return [*cds.java(jars), "-Xmx256m", "-cp", jars.classpath, main, *args]


def _run_tool(cmd: list[str], what: str, timeout: float = 120.0) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["?"]
        raise TestbedError(f"{what} failed: {tail[0]}")
    return result.stdout


def election_json(partitions: Iterable[tuple[str, int]]) -> str:
    """kafka-leader-election's --path-to-json-file: the partitions to elect for."""
    rows = [{"topic": t, "partition": p} for t, p in partitions]
    return json.dumps({"partitions": rows})


def reassignment_json(moves: Mapping[tuple[str, int], Sequence[int]]) -> str:
    """kafka-reassign-partitions' --reassignment-json-file: each partition's new replicas,
    the preferred leader first."""
    rows = [
        {
            "topic": t,
            "partition": p,
            "replicas": list(replicas),
        }
        for (t, p), replicas in moves.items()
    ]
    return json.dumps({"version": 1, "partitions": rows})


def elect_preferred_leaders(
    bootstrap: str, partitions: Iterable[tuple[str, int]], *, jars: KafkaJars | None = None
) -> str:
    """kafka-leader-election --election-type PREFERRED for ``partitions``: each one's first
    replica leads again if it is in sync. Returns the tool's report (a partition whose
    preferred leader already leads is reported, not failed)."""
    return elect_leaders(bootstrap, partitions, "PREFERRED", jars=jars)


def elect_leaders(
    bootstrap: str,
    partitions: Iterable[tuple[str, int]],
    election_type: str,
    *,
    jars: KafkaJars | None = None,
) -> str:
    """kafka-leader-election --election-type ``election_type`` (PREFERRED or UNCLEAN) for
    ``partitions``. UNCLEAN makes a replica out of sync leader of a partition that has no
    leader: the records only the lost leader held are gone (how a remote that loses records
    already copied is staged)."""
    jars = (jars or KafkaJars.default()).ensure()
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="election-") as spec:
        spec.write(election_json(partitions))
        spec.flush()
        cmd = tool_command(
            jars,
            "org.apache.kafka.tools.LeaderElectionCommand",
            "--bootstrap-server",
            bootstrap,
            "--election-type",
            election_type,
            "--path-to-json-file",
            spec.name,
        )
        return _run_tool(cmd, "kafka-leader-election")


def quorum_leader(bootstrap: str, *, jars: KafkaJars | None = None) -> int:
    """The node id of the active KRaft controller (kafka-metadata-quorum describe
    --status: its LeaderId). A test that pauses a node of a combined cluster keeps it off
    that node, or every controller call waits for the quorum to elect another."""
    jars = (jars or KafkaJars.default()).ensure()
    main = "org.apache.kafka.tools.MetadataQuorumCommand"
    report = _run_tool(
        tool_command(jars, main, "--bootstrap-server", bootstrap, "describe", "--status"),
        "kafka-metadata-quorum",
    )
    return parse_quorum_leader(report)


def parse_quorum_leader(report: str) -> int:
    """The LeaderId of a kafka-metadata-quorum --status report."""
    for line in report.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "LeaderId":
            return int(value)
    raise TestbedError(f"kafka-metadata-quorum named no leader: {report.strip()[:200]}")


def reassign_partitions(
    bootstrap: str,
    moves: Mapping[tuple[str, int], Sequence[int]],
    *,
    jars: KafkaJars | None = None,
    timeout: float = 120.0,
) -> None:
    """kafka-reassign-partitions --execute, then --verify until every move is complete (the
    new replicas caught up, the old ones removed, a leader outside the new set replaced)."""
    jars = (jars or KafkaJars.default()).ensure()
    main = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
    deadline = time.monotonic() + timeout
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="reassign-") as spec:
        spec.write(reassignment_json(moves))
        spec.flush()
        common = ("--bootstrap-server", bootstrap, "--reassignment-json-file", spec.name)
        _run_tool(tool_command(jars, main, *common, "--execute"), "kafka-reassign-partitions")
        while True:
            report = _run_tool(
                tool_command(jars, main, *common, "--verify"), "kafka-reassign-partitions"
            )
            if reassignment_done(report):
                return
            if time.monotonic() > deadline:
                raise TestbedError(f"reassignment not complete within {timeout:.0f}s: {report}")
            time.sleep(1.0)


def reassignment_done(report: str) -> bool:
    """Does a --verify report say every partition's move is complete?"""
    lines = [ln for ln in report.splitlines() if ln.startswith("Reassignment of partition")]
    return bool(lines) and all(ln.rstrip().endswith("is completed.") for ln in lines)
