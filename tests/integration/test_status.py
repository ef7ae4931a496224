"""What operators look at: the daemon's /status, /metrics, /healthz and /readyz, and
``syncer status`` reading them: per-remote figures, ends that match the clusters."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import yaml

from syncer.errors import ExitCode
from syncer.http import StatusServer
from syncer.syncer import Syncer
from syncer.testbed.bed import free_port
from tests.integration.test_many_remotes import fill, mirror, syncer_for
from tests.kafka_helpers import Daemon, create_topic, get, read_partition, run_cli, samples

WAIT_S = 60


def caught_up(records: int) -> object:
    def check(doc: dict[str, list[dict[str, object]]]) -> bool:
        parts = doc["partitions"]
        return bool(parts) and all(p["local_end"] == records for p in parts)

    return check


async def test_status_shows_which_remote_served_how_much(
    local: str, east: str, west: str, topic: str, tmp_path: Path, daemons: list[Daemon]
) -> None:
    await create_topic(east, topic)
    await fill(east, topic, 1000)
    await mirror(east, west, topic)
    await fill(west, topic, 1000, start=1000)  # only west holds 1000..2000
    daemon = Daemon(
        tmp_path,
        {
            "local": {"bootstrap_servers": local},
            "remotes": [
                {"name": "east", "bootstrap_servers": east},
                {"name": "west", "bootstrap_servers": west},
            ],
            "topics": {"include": [topic]},
            "copier": {"partition_fetch_max_bytes": 8192, "max_chunks": 6},
        },
    )
    daemons.append(daemon)
    await daemon.wait_for("local at 2000", caught_up(2000))

    result = run_cli("status", "-c", str(daemon.path), "--daemon", daemon.url, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    remotes = {r["name"]: r for r in report["remotes"]}
    assert remotes["east"]["ahead"] == 0 and remotes["west"]["ahead"] == 0
    assert remotes["east"]["partitions"] == remotes["west"]["partitions"] == 1
    assert remotes["east"]["served_bytes"] > 0 and remotes["west"]["served_bytes"] > 0
    assert remotes["east"]["served_records"] + remotes["west"]["served_records"] == 2000
    assert remotes["west"]["served_records"] >= 1000  # all that only west holds
    assert {r["health"] for r in remotes.values()} == {"healthy"}
    (row,) = report["partitions"]
    assert row["local_end"] == 2000 and row["served"] == {
        "east": remotes["east"]["served_bytes"],
        "west": remotes["west"]["served_bytes"],
    }

    table = run_cli("status", "-c", str(daemon.path), "--daemon", daemon.url)
    assert table.returncode == 0
    assert "served MB" in table.stdout and "healthy" in table.stdout

    code, text = await asyncio.to_thread(get, f"{daemon.url}/metrics")
    assert code == 200
    found = samples(text)
    for name in ("east", "west"):
        key = ("syncer_remote_served_bytes_total", frozenset({("remote", name)}))
        assert found[key] == remotes[name]["served_bytes"]
    part = frozenset({("topic", topic), ("partition", "0")})
    assert found[("syncer_partition_local_end_offset", part)] == 2000
    assert found[("syncer_partition_lag_records", part)] == 0
    assert found[("syncer_partition_remote_end_offset", part | {("remote", "east")})] == 1000
    assert found[("syncer_partition_remote_end_offset", part | {("remote", "west")})] == 2000
    assert (await asyncio.to_thread(get, f"{daemon.url}/healthz"))[0] == 200
    assert (await asyncio.to_thread(get, f"{daemon.url}/readyz"))[0] == 200
    assert await read_partition(local, topic) == await read_partition(west, topic)


async def test_status_names_a_remote_that_is_down_and_still_shows_the_rest(
    local: str, east: str, topic: str, tmp_path: Path
) -> None:
    await create_topic(east, topic)
    await fill(east, topic, 100)
    dead = f"127.0.0.1:{free_port()}"
    config = tmp_path / "syncer.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "local": {"bootstrap_servers": local},
                "remotes": [
                    {"name": "east", "bootstrap_servers": east},
                    {"name": "gone", "bootstrap_servers": dead, "request_timeout_ms": 3000},
                ],
                "topics": {"include": [topic]},
                "http": {"listen": ""},
            }
        )
    )
    result = run_cli("status", "-c", str(config), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    remotes = {r["name"]: r for r in report["remotes"]}
    assert remotes["gone"]["reachable"] is False and remotes["east"]["reachable"] is True
    assert remotes["east"]["ahead"] == 100
    assert [r["remote_ends"] for r in report["partitions"]] == [{"east": 100}]
    assert any(n.startswith("remote gone is unreachable") for n in report["notes"])


async def test_a_dropped_remote_shows_in_status_and_metrics(
    local: str, east: str, west: str, topic: str
) -> None:
    await create_topic(east, topic)
    await create_topic(west, topic)
    await fill(east, topic, 300, tag=b"a")
    await fill(west, topic, 300, tag=b"b")  # same offsets, other records
    syncer: Syncer = syncer_for(local, {"east": east, "west": west}, topic)
    async with syncer, StatusServer(syncer, ("127.0.0.1", 0)) as server:
        await syncer.catch_up()
        status = json.loads((await asyncio.to_thread(get, f"{server.url}/status"))[1])
        metrics = samples((await asyncio.to_thread(get, f"{server.url}/metrics"))[1])
    remotes = {r["name"]: r for r in status["remotes"]}
    assert remotes["west"]["dropped_partitions"] == 1 and remotes["east"]["dropped_partitions"] == 0
    (row,) = status["partitions"]
    assert row["dropped"]["west"].startswith("records differ from remote east's")
    key = frozenset({("topic", topic), ("partition", "0"), ("remote", "west")})
    assert metrics[("syncer_partition_remote_dropped", key)] == 1
    assert ("syncer_partition_remote_dropped", key | {("remote", "east")}) not in metrics


def test_a_busy_http_port_is_one_clear_line(tmp_path: Path, local: str, east: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "syncer.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "local": {"bootstrap_servers": local},
                    "remotes": [{"name": "east", "bootstrap_servers": east}],
                    "topics": {"include": ["nothing-here"]},
                    "http": {"listen": f"127.0.0.1:{port}"},
                }
            )
        )
        result = run_cli("run", "-c", str(config))
    assert result.returncode == ExitCode.CONFIG
    lines = result.stderr.strip().splitlines()
    expected = f"syncer: http.listen: cannot listen on 127.0.0.1:{port}: Address already in use"
    assert lines == [expected]
