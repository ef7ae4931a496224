"""Bandwidth caps on real brokers: a remote's cap and the process's cap hold the copy of a
large backlog to the rate set, the status says so, and the copy is exact.

The upper bound is what a cap promises and noise cannot break (a slow machine only copies
slower); the lower bound is loose, only to show the cap is not simply starving the copy.
``make bench-caps`` measures the rate against the cap over 30 s."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from syncer.ratelimit import BURST_S
from syncer.status import State, status_document
from syncer.syncer import Syncer
from syncer.testbed import Testbed
from syncer.testbed.tools import perf_produce
from tests.kafka_helpers import create_topic, make_config, partition_digests

log = logging.getLogger(__name__)

PARTITIONS = 4
RECORDS = 24_000  # of 1 KiB: ~25 MB
SETTLE_S = 1.0  # the first second (a full bucket, connections opening) is not measured


async def backlog(bootstrap: str, topic: str, testbed: Testbed) -> None:
    await create_topic(bootstrap, topic, PARTITIONS)
    await asyncio.to_thread(
        perf_produce, bootstrap, topic, records=RECORDS, record_size=1024, jars=testbed.jars
    )


def fetched(syncer: Syncer) -> int:
    """Record bytes fetched from the remotes, as the cluster layer counts them per broker
    (apart from the caps' own count): what crossed the link."""
    return sum(sum(r.fetched_by_node.values()) for r in syncer.snapshot().remotes)


def most(cap: float, seconds: float) -> float:
    """The most a cap lets through in ``seconds``, as a rate: the cap, plus a full bucket and
    the answers of the two requests that may be out on a broker's data connection, each
    about a burst (``ratelimit.request_bytes``)."""
    return cap + 3 * cap * BURST_S / seconds


async def copy_rate(syncer: Syncer) -> tuple[float, float, dict[str, object]]:
    """Bytes per second fetched, from SETTLE_S after the start to the last sample before
    the copy caught up; and the status taken mid-way."""
    copying = asyncio.create_task(syncer.catch_up())
    samples: list[tuple[float, int]] = []
    doc: dict[str, object] = {}
    started = time.monotonic()
    while not copying.done():
        now = time.monotonic()
        copied = fetched(syncer)
        if now - started >= SETTLE_S:
            samples.append((now, copied))
        if not doc and now - started >= 3:
            doc = status_document(syncer.snapshot())
        await asyncio.sleep(0.1)
    await copying
    (t0, b0), (t1, b1) = samples[0], samples[-2]
    return (b1 - b0) / (t1 - t0), t1 - t0, doc


async def test_a_remote_cap_and_the_process_cap_hold_the_copy_to_their_rate(
    local: str, east: str, topic: str, testbed: Testbed
) -> None:
    first, second = f"{topic}-remote-cap", f"{topic}-process-cap"
    for name in (first, second):
        await backlog(east, name, testbed)

    config = make_config(local, {"east": east}, [first])
    capped = dataclasses.replace(config.remotes[0], max_bytes_per_second=4_000_000)
    async with Syncer(dataclasses.replace(config, remotes=(capped,))) as syncer:
        rate, seconds, doc = await copy_rate(syncer)
    log.warning("remote cap 4.0 MB/s: fetched at %.2f MB/s over %.1f s", rate / 1e6, seconds)
    assert 0.7 * 4e6 <= rate <= most(4e6, seconds)
    (remote,) = doc["remotes"]  # type: ignore[misc]
    assert remote["max_bytes_per_s"] == 4_000_000
    assert 0.5 * 4e6 <= remote["rate_bytes_per_s"] <= 1.25 * 4e6
    assert {s.state for s in syncer.statuses()} == {State.CAUGHT_UP}

    config = make_config(local, {"east": east}, [second])
    copier = dataclasses.replace(config.copier, max_bytes_per_second=2_500_000)
    async with Syncer(dataclasses.replace(config, copier=copier)) as syncer:
        rate, seconds, doc = await copy_rate(syncer)
    log.warning("process cap 2.5 MB/s: fetched at %.2f MB/s over %.1f s", rate / 1e6, seconds)
    assert 0.7 * 2.5e6 <= rate <= most(2.5e6, seconds)
    assert doc["max_bytes_per_s"] == 2_500_000

    for name in (first, second):
        for partition in range(PARTITIONS):
            assert await partition_digests(local, name, partition) == await partition_digests(
                east, name, partition
            )
