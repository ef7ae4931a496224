"""examples/embed.py, a host service running a Syncer, against the test bed: the copy, the
events it received, syncer's metrics and its own on its one port, and a clean SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from syncer.testbed.bed import free_port
from tests.kafka_helpers import create_topic, get, produce, read_partition, samples

EXAMPLE = Path(__file__).parents[2] / "examples" / "embed.py"
PARTITIONS = 2
RECORDS = 50


Events = list[dict[str, Any]]


def wait_for_events(
    service: subprocess.Popen[str], url: str, enough: Callable[[Events], bool], timeout: float = 45
) -> Events:
    """The service's /events once ``enough`` of them came."""
    deadline = time.monotonic() + timeout
    seen: Events = []
    while time.monotonic() < deadline and service.poll() is None:
        try:
            code, body = get(f"{url}/events")
        except OSError:  # not listening yet
            code, body = 0, ""
        if code == 200:
            seen = json.loads(body)
            if enough(seen):
                return seen
        time.sleep(0.3)
    raise AssertionError(f"the events awaited did not come in {timeout}s: {seen}")


def caught_up(events: Events) -> dict[int, int]:
    """Partition → the end of its last CaughtUp."""
    return {e["partition"]: e["end"] for e in events if e["event"] == "CaughtUp"}


async def test_embedded_service_copies_reports_and_stops_on_sigterm(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic, partitions=PARTITIONS)
    for partition in range(PARTITIONS):
        records = [(f"k{i}".encode(), f"v{partition}-{i}".encode()) for i in range(RECORDS)]
        await produce(east, topic, records, partition=partition)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, str(EXAMPLE), "--local", local, "--remote", f"east={east}"]
    command += ["--topic", topic, "--port", str(port), "--name", f"embed-{topic}"]
    service = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        events = wait_for_events(service, url, lambda seen: len(caught_up(seen)) == PARTITIONS)
        assert not [e for e in events if e["event"] in ("Halted", "RemoteDropped")]
        # more records at the remote: the partition copies again, then is caught up again
        await produce(east, topic, [(b"late", b"late")] * 10, partition=0)
        events = wait_for_events(service, url, lambda seen: caught_up(seen).get(0) == RECORDS + 10)
        # after its first CaughtUp (a Resumed before it may follow a retry: a new local
        # topic's leader not known yet, seen in CI)
        first = next(
            i for i, e in enumerate(events) if e["event"] == "CaughtUp" and not e["partition"]
        )
        resumed = [e for e in events[first:] if e["event"] == "Resumed"]
        assert resumed and {k: v for k, v in resumed[0].items() if k != "at"} == {
            "event": "Resumed",
            "topic": topic,
            "partition": 0,
            "after": "caught-up",
        }
        for partition in range(PARTITIONS):
            assert await read_partition(local, topic, partition) == await read_partition(
                east, topic, partition
            )

        code, page = get(f"{url}/metrics")
        assert code == 200
        figures = samples(page)
        assert figures[("embed_heartbeats_total", frozenset())] >= 1  # the host's own
        for partition in range(PARTITIONS):
            labels = frozenset({("topic", topic), ("partition", str(partition))})
            expected = RECORDS + 10 if partition == 0 else RECORDS
            assert figures[("syncer_partition_local_end_offset", labels)] == expected
        code, body = get(f"{url}/status")
        states = {p["partition"]: p["state"] for p in json.loads(body)["partitions"]}
        assert states == {p: "caught-up" for p in range(PARTITIONS)}

        service.send_signal(signal.SIGTERM)
        output, _ = service.communicate(timeout=30)
    except BaseException:
        service.kill()
        print(service.communicate()[0])  # the service's log, shown with the failure
        raise
    assert service.returncode == 0, output
    assert "syncer event: CaughtUp" in output  # the host's logging shows syncer's events
    assert "summary ◆ 2 partitions ◆ 110 records" in output
    assert "Traceback" not in output
