"""TLS and SASL against real brokers of a bed of their own: a remote speaking SASL_SSL with
SCRAM-SHA-512 users, a local cluster speaking mutual TLS with ACLs enforced; certificates
made by openssl when the bed starts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from syncer.config import Config
from syncer.errors import ExitCode
from syncer.status import State
from syncer.syncer import Syncer
from syncer.testbed import ClusterSpec, RunningCluster, Testbed
from syncer.testbed.tools import add_acl
from tests.kafka_helpers import create_topic, own_bed, produce, read_partition, run_cli

PASSWORD = "correct-horse-battery-staple-7"
WRONG = "wrong-password-do-not-print-42"


@pytest.fixture(scope="module")
def secure_bed(tmp_path_factory: pytest.TempPathFactory, testbed: Testbed) -> Iterator[Testbed]:
    specs = [
        ClusterSpec("tls-local", security="SSL", authorizer=True),
        ClusterSpec("sasl-remote", security="SASL_SSL", scram_users={"syncer": PASSWORD}),
    ]
    with own_bed(tmp_path_factory.mktemp("secure"), testbed.jars, specs) as bed:
        yield bed


def settings(
    secure_bed: Testbed, topic: str, password: str = PASSWORD, **topics: Any
) -> dict[str, Any]:
    local, remote = secure_bed.clusters["tls-local"], secure_bed.clusters["sasl-remote"]
    local_certs, remote_certs = local.certificates, remote.certificates
    return {
        "local": {
            "bootstrap_servers": local.bootstrap,
            "security_protocol": "SSL",
            "ssl_cafile": str(local_certs.ca),
            "ssl_certfile": str(local_certs.client_cert),
            "ssl_keyfile": str(local_certs.client_key),
        },
        "remotes": [
            {
                "name": "east",
                "bootstrap_servers": remote.bootstrap,
                "security_protocol": "SASL_SSL",
                "ssl_cafile": str(remote_certs.ca),
                "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_username": "syncer",
                "sasl_password": password,
            }
        ],
        "topics": {"include": [f"{topic}.*"], **topics},
        "copier": {"shutdown_timeout_s": 10},
        "http": {"listen": ""},
    }


async def test_sasl_ssl_scram_remote_to_tls_local_is_exact(secure_bed: Testbed, topic: str) -> None:
    remote = secure_bed.clusters["sasl-remote"]
    await create_topic(remote.direct, topic, 2)
    for partition in (0, 1):
        await produce(
            remote.direct, topic, [(b"k", b"%d" % i) for i in range(300)], partition=partition
        )
    config = Config.from_dict(settings(secure_bed, topic))
    assert PASSWORD not in repr(config)  # secrets stay out of reprs (and so out of logs)
    async with Syncer(config) as syncer:
        await syncer.catch_up()
        assert all(s.state is State.CAUGHT_UP for s in syncer.statuses())
    local = secure_bed.clusters["tls-local"]
    for partition in (0, 1):
        copied = await read_partition(local.direct, topic, partition)
        assert copied == await read_partition(remote.direct, topic, partition)
        assert len(copied) == 300


def test_a_wrong_password_is_one_clear_line_without_the_password(
    secure_bed: Testbed, topic: str, tmp_path: Path
) -> None:
    config = tmp_path / "syncer.yaml"
    config.write_text(yaml.safe_dump(settings(secure_bed, topic, password=WRONG)))
    started = time.monotonic()
    result = run_cli("catch-up", "-c", str(config), "--no-progress")
    assert result.returncode == ExitCode.AUTHENTICATION
    assert time.monotonic() - started < 30  # no retry storm: one attempt, then out
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "authentication failed (SCRAM-SHA-512 as 'syncer')" in lines[0]
    assert "remote cluster 'east'" in lines[0]
    assert WRONG not in result.stdout + result.stderr


def test_the_password_from_a_file_and_from_the_environment(
    secure_bed: Testbed, topic: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    raw = settings(secure_bed, topic)
    del raw["remotes"][0]["sasl_password"]
    raw["remotes"][0]["sasl_password_file"] = str(secret)
    assert Config.from_dict(raw).remotes[0].sasl_password == PASSWORD
    monkeypatch.setenv("EAST_PASSWORD", PASSWORD)
    del raw["remotes"][0]["sasl_password_file"]
    raw["remotes"][0]["sasl_password"] = "${EAST_PASSWORD}"
    assert Config.from_dict(raw).remotes[0].sasl_password == PASSWORD


async def test_a_topic_the_acls_forbid_writing_halts_and_the_others_finish(
    secure_bed: Testbed, topic: str
) -> None:
    local: RunningCluster = secure_bed.clusters["tls-local"]
    remote = secure_bed.clusters["sasl-remote"]
    denied, allowed = f"{topic}.denied", f"{topic}.allowed"
    for name in (denied, allowed):
        await create_topic(remote.direct, name, 1)
        await produce(remote.direct, name, [(b"k", b"%d" % i) for i in range(50)])
    principal = "User:CN=syncer"  # the client certificate's subject
    add_acl(
        local.direct,
        "--allow-principal",
        principal,
        "--operation",
        "All",
        "--topic",
        denied,
        jars=secure_bed.jars,
    )
    add_acl(
        local.direct,
        "--deny-principal",
        principal,
        "--operation",
        "Write",
        "--topic",
        denied,
        jars=secure_bed.jars,
    )
    config = Config.from_dict(settings(secure_bed, topic))
    async with Syncer(config) as syncer:
        await syncer.catch_up()
        by_topic = {s.tp.topic: s for s in syncer.statuses()}
    assert by_topic[allowed].state is State.CAUGHT_UP and by_topic[allowed].local_end == 50
    halted = by_topic[denied]
    assert halted.state is State.HALTED and halted.local_end == 0
    assert halted.error is not None and "TopicAuthorizationFailed" in halted.error
    assert await read_partition(local.direct, allowed) == await read_partition(
        remote.direct, allowed
    )
