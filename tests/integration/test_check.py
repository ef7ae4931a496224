"""``syncer check`` against real brokers: a local cluster speaking SASL/SCRAM with ACLs
enforced (a bed of its own), the session's ``east`` as the remote. A good setup is all OK
(exit 0); a local topic with LogAppendTime and a principal without WRITE each FAIL with the
setting or the ACL named (exit 10); ``syncer run``'s start logs the same FAIL."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from syncer.check import Level
from syncer.clusters import TP, Cluster
from syncer.config import ClusterConfig
from syncer.errors import ConfigError, ExitCode
from syncer.preflight import preflight
from syncer.syncer import Syncer
from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.bed import free_port
from syncer.testbed.proxy import LinkProxy
from syncer.testbed.tools import add_acl
from tests.kafka_helpers import (
    create_topic,
    make_config,
    own_bed,
    produce,
    produce_transactions,
    run_cli,
)

PASSWORD = "check-password-31"


@pytest.fixture(scope="module")
def acl_bed(tmp_path_factory: pytest.TempPathFactory, testbed: Testbed) -> Iterator[Testbed]:
    users = {"syncer": PASSWORD, "limited": PASSWORD}
    spec = ClusterSpec("check-local", security="SASL_PLAINTEXT", scram_users=users, authorizer=True)
    with own_bed(tmp_path_factory.mktemp("check"), testbed.jars, [spec]) as bed:
        yield bed


def settings(bed: Testbed, east: str, topic: str, user: str = "syncer") -> dict[str, Any]:
    return {
        "local": {
            "bootstrap_servers": bed.clusters["check-local"].bootstrap,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": user,
            "sasl_password": PASSWORD,
        },
        "remotes": [{"name": "east", "bootstrap_servers": east}],
        "topics": {"include": [topic]},
        "http": {"listen": ""},
    }


def check(raw: dict[str, Any], tmp_path: Path) -> tuple[int, list[dict[str, str]]]:
    path = tmp_path / "syncer.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = run_cli("check", "-c", str(path), "--json", timeout=90)
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


def failures(lines: list[dict[str, str]]) -> list[dict[str, str]]:
    return [line for line in lines if line["level"] == "FAIL"]


async def test_a_good_setup_is_all_ok(
    acl_bed: Testbed, east: str, topic: str, tmp_path: Path
) -> None:
    await create_topic(east, topic, 2)
    await produce(east, topic, [(b"k", b"%d" % i) for i in range(30)], partition=1)
    group = f"{topic}.group"  # a group at the remote whose offsets are copied
    async with Cluster(ClusterConfig(east, name="east"), role="remote") as remote:
        assert await remote.commit_offsets(group, {TP(topic, 1): 10}) == {TP(topic, 1): 0}
    raw = settings(acl_bed, east, topic)
    raw["groups"] = {"include": [group]}
    raw["coordination"] = {"group": f"{topic}.syncer"}
    code, lines = check(raw, tmp_path)
    assert [line for line in lines if line["level"] != "OK"] == []
    assert code == ExitCode.OK
    checked = {(line["where"], line["what"], line["detail"]) for line in lines}
    asked = {(where, what) for where, what, _ in checked}
    assert ("local", "connect") in asked and ("remote east", "version") in asked
    assert (f"topic {topic}", "partitions") in asked  # created by run: CREATE checked
    assert (f"{topic}[1]", "holes") in asked  # 30 records to copy, scanned
    assert ("local", "acl", f"DESCRIBE/READ on group {topic}.syncer") in checked
    assert ("remote east", "acl", f"DESCRIBE on group {group}") in checked


async def test_a_local_topic_with_log_append_time_fails_naming_the_setting(
    acl_bed: Testbed, east: str, topic: str, tmp_path: Path
) -> None:
    await create_topic(east, topic, 1)
    local = acl_bed.clusters["check-local"].direct
    await create_topic(local, topic, 1, **{"message.timestamp.type": "LogAppendTime"})
    raw = settings(acl_bed, east, topic)
    code, lines = check(raw, tmp_path)
    assert code == ExitCode.CHECK_FAILED
    (failed,) = failures(lines)
    assert failed["where"] == f"topic {topic}" and failed["what"] == "settings"
    assert "local message.timestamp.type is LogAppendTime" in failed["detail"]
    # `syncer run` checks the same at its start and logs the FAIL (the copy refuses the topic)
    command = [sys.executable, "-m", "syncer", "run", "-c", str(tmp_path / "syncer.yaml")]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as daemon:
        reader = asyncio.ensure_future(asyncio.to_thread(first_line, daemon, "check FAIL"))
        await asyncio.wait({reader}, timeout=30)
        daemon.send_signal(signal.SIGTERM)
        logged = await reader  # found, or ends with the daemon's stderr
        daemon.wait(timeout=30)
    assert f"check FAIL topic {topic} settings: local message.timestamp.type is" in logged
    assert daemon.returncode == ExitCode.HALTED  # it ran; the topic was refused, as before


def first_line(daemon: subprocess.Popen[str], text: str) -> str:
    """The first line of the daemon's stderr holding ``text`` ("" if it ends without one)."""
    assert daemon.stderr is not None
    for line in daemon.stderr:
        if text in line:
            return line
    return ""


async def test_a_principal_without_write_fails_naming_the_acl(
    acl_bed: Testbed, east: str, topic: str, tmp_path: Path
) -> None:
    await create_topic(east, topic, 1)
    local = acl_bed.clusters["check-local"].direct
    await create_topic(local, topic, 1)
    # with an ACL on the topic, what is not granted is denied (no allow-everyone fallback)
    granted = ("Describe", "Read", "DescribeConfigs")
    operations = [arg for op in granted for arg in ("--operation", op)]
    add_acl(
        local, "--allow-principal", "User:limited", *operations, "--topic", topic, jars=acl_bed.jars
    )
    code, lines = check(settings(acl_bed, east, topic, user="limited"), tmp_path)
    assert code == ExitCode.CHECK_FAILED
    (failed,) = failures(lines)
    assert failed["where"] == "local" and failed["what"] == "acl"
    assert failed["detail"] == f"missing ACL: ALLOW User:limited WRITE on topic {topic}"


def test_a_refused_password_fails_naming_the_cluster(
    acl_bed: Testbed, east: str, topic: str, tmp_path: Path
) -> None:
    raw = settings(acl_bed, east, topic)
    raw["local"]["sasl_password"] = "not-" + PASSWORD
    code, lines = check(raw, tmp_path)
    assert code == ExitCode.CHECK_FAILED
    (failed,) = failures(lines)
    assert failed["where"] == "local" and failed["what"] == "connect"
    assert "local cluster 'local'" in failed["detail"]
    assert "authentication failed (SCRAM-SHA-512 as 'syncer')" in failed["detail"]
    assert ("remote east", "connect", "OK") in {(x["where"], x["what"], x["level"]) for x in lines}


async def test_a_hole_ahead_and_data_lost_at_the_source_fail(
    acl_bed: Testbed, east: str, topic: str, tmp_path: Path
) -> None:
    await create_topic(east, topic, 2)
    # partition 0: a committed transaction, whose marker is a hole (on_hole: halt)
    await produce_transactions(east, topic, [(True, [(b"k", b"v")] * 3)], partition=0)
    # partition 1: records deleted at the remote below 10 while the local one is empty
    await produce(east, topic, [(b"k", b"%d" % i) for i in range(20)], partition=1)
    async with Cluster(ClusterConfig(east, name="east"), role="remote") as remote:
        assert await remote.delete_records(TP(topic, 1), 10) == 10
    await create_topic(acl_bed.clusters["check-local"].direct, topic, 2)
    code, lines = check(settings(acl_bed, east, topic), tmp_path)
    assert code == ExitCode.CHECK_FAILED
    found = {(x["where"], x["what"]): x["detail"] for x in failures(lines)}
    assert found == {
        (f"{topic}[0]", "holes"): "hole at offset 3: transaction marker (on_hole: halt)",
        (f"{topic}[1]", "source"): (
            "data lost at the source: local ends at 0, the remotes start at 10"
        ),
    }


async def test_a_remote_that_is_the_local_cluster_under_another_address_is_refused(
    local: str, topic: str
) -> None:
    """The config's check compares addresses; the local cluster reached through a second
    address (a proxy here; a load balancer, a DNS alias in life) passes it. Its cluster id
    tells: ``syncer check`` fails it, and a start refuses it as bad configuration (exit 3)."""
    await create_topic(local, topic)
    async with LinkProxy(free_port(), local) as proxy:
        alias = f"127.0.0.1:{proxy.listen_port}"
        config = make_config(local, {"east": alias}, [topic])
        lines = await preflight(config)
        same = [line for line in lines if line.what == "cluster"]
        assert [(line.level, line.where) for line in same] == [(Level.FAIL, "remote east")]
        assert same[0].detail.startswith("is the local cluster itself (cluster id ")
        with pytest.raises(ConfigError) as refused:
            async with Syncer(config):
                pass
    assert refused.value.exit_code == ExitCode.CONFIG
    assert str(refused.value).startswith(
        "config: remotes[east].bootstrap_servers: is the local cluster itself (cluster id "
    )


async def test_a_remote_that_is_another_cluster_is_not_taken_for_the_local_one(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    lines = await preflight(make_config(local, {"east": east}, [topic]))
    assert [line for line in lines if line.what == "cluster"] == []
    async with Syncer(make_config(local, {"east": east}, [topic])) as syncer:
        assert list(syncer.remotes) == ["east"]


async def test_a_local_topic_that_would_refuse_a_record_for_its_age_fails(
    local: str, east: str, topic: str
) -> None:
    """The local topic takes records up to 2.5 days old; the remote's first record to copy
    is 3 days old: the copy would halt there (InvalidTimestamp), so the check says so up
    front. A topic syncer would create gets the brokers' defaults, which take it."""
    day_ms = 86_400_000
    created = f"{topic}.new"
    await create_topic(local, topic, **{"message.timestamp.before.max.ms": str(int(2.5 * day_ms))})
    for name in (topic, created):
        await create_topic(east, name)
        await produce(
            east, name, [(b"k", b"old")], timestamp_ms=int(time.time() * 1000) - 3 * day_ms
        )
    lines = await preflight(make_config(local, {"east": east}, [topic, created]))
    stamped = [line for line in lines if line.what == "timestamps"]
    assert [(line.level, line.where) for line in stamped] == [(Level.FAIL, f"topic {topic}")]
    assert stamped[0].detail.startswith(
        "the local topic refuses records more than 60.0 h old (message.timestamp.before.max.ms),"
        " and a record to copy is 72.0 h old"
    )
