"""The local disk fills up under a running daemon: the local broker fails its writes ("No
space left on device") and stops; the daemon keeps running and halts nothing; once space is
freed and the broker restarted (recovering its log from what reached the disk), the copy
completes identical to the remote. The local broker's data directory is a small tmpfs, which
needs root; where the machine refuses the mount, the test is skipped and says why."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from syncer.testbed import ClusterSpec, Testbed
from tests.integration.test_operations import RECORDS, assert_identical, backlog, copied, daemon_for
from tests.kafka_helpers import Daemon, get, own_bed, samples

FULL_MIB = 24  # the backlog is 40 MB: the disk fills a little past half-way
FREED_MIB = 256


def mount_tmpfs(path: Path, mib: int, *, remount: bool = False) -> subprocess.CompletedProcess[str]:
    options = f"remount,size={mib}m" if remount else f"size={mib}m"
    return subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def small_disk(tmp_path_factory: pytest.TempPathFactory, testbed: Testbed) -> Iterator[Testbed]:
    root = tmp_path_factory.mktemp("full")
    data = root / "full_local" / "data"  # the data directory the bed gives this cluster
    data.mkdir(parents=True)
    mounted = mount_tmpfs(data, FULL_MIB)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a {FULL_MIB} MiB tmpfs: {mounted.stderr.strip()}")
    try:
        with own_bed(root, testbed.jars, [ClusterSpec("full_local")]) as bed:
            yield bed
    finally:
        subprocess.run(["umount", "-l", str(data)], check=False)


async def test_a_full_local_disk_stops_the_broker_and_the_copy_resumes_exactly(
    small_disk: Testbed, east: str, topic: str, tmp_path: object, daemons: list[Daemon]
) -> None:
    local = small_disk.clusters["full_local"]
    await backlog(small_disk, east, topic)
    daemon = daemon_for(tmp_path, local.bootstrap, east, topic)
    daemons.append(daemon)
    # the broker fails a write for want of space, takes its log directory offline and, with
    # no directory left, stops
    for _ in range(600):
        if not local.is_running():
            break
        await asyncio.sleep(0.1)
    assert not local.is_running(), "the local broker kept running on a full disk"
    assert "No space left on device" in local.log_path.read_text(errors="replace")
    await asyncio.sleep(5)  # the daemon retries against a cluster that is gone
    assert daemon.proc.poll() is None
    doc = cast(dict[str, list[dict[str, Any]]], await daemon.status())
    states = {partition["state"] for partition in doc["partitions"]}
    assert "halted" not in states, states
    stopped_at = copied(doc)
    assert 0 < stopped_at < RECORDS

    # the operator frees space and starts the broker again; it recovers its log
    freed = mount_tmpfs(Path(local.directory) / "data", FREED_MIB, remount=True)
    assert freed.returncode == 0, freed.stderr
    await asyncio.to_thread(local.start, small_disk.jars)
    await asyncio.to_thread(local.wait_ready)
    await daemon.wait_for("all copied", lambda doc: copied(doc) == RECORDS)
    await assert_identical(local.bootstrap, east, topic)  # nothing lost, nothing twice
    found = samples((await asyncio.to_thread(get, f"{daemon.url}/metrics"))[1])
    retried = sum(v for (name, _l), v in found.items() if name == "syncer_partition_retries_total")
    assert retried > 0  # the failed writes were retried, not skipped
