"""Many remotes, BitTorrent-style: the gap comes from any remote ahead of local, several at
once; a remote that dies loses its chunks to the others; a remote that disagrees is dropped."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import signal
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path

import pytest

from syncer import syncer as syncer_module
from syncer.errors import UnreachableError
from syncer.metrics import exposition
from syncer.status import PartitionStatus, State, status_document
from syncer.syncer import Syncer
from syncer.testbed import ClusterSpec, Testbed
from tests.integration.test_faults import delete_topic
from tests.kafka_helpers import (
    create_topic,
    first_status,
    kcat_lines,
    make_config,
    partition_digests,
    produce,
    read_partition,
    until,
)

SMALL_CHUNKS = {"partition_fetch_max_bytes": 8192, "fetch_max_bytes": 65536, "max_chunks": 6}


async def fill(bootstrap: str, topic: str, count: int, tag: bytes = b"v", start: int = 0) -> None:
    for first in range(start, start + count, 50):  # batches of 50 records of ~300 bytes
        await produce(
            bootstrap,
            topic,
            [(b"k%d" % i, tag * 300) for i in range(first, min(first + 50, start + count))],
            linger_ms=50,
        )


async def mirror(source: str, target: str, topic: str) -> None:
    """Make ``target`` an offset-aligned copy of ``source`` (with syncer itself)."""
    async with Syncer(make_config(target, {"src": source}, [topic])) as syncer:
        await syncer.catch_up()


@contextlib.contextmanager
def paused(testbed: Testbed, name: str) -> Iterator[None]:
    """Cluster ``name``'s broker stopped (SIGSTOP: it takes connections, answers nothing)."""
    pid = testbed.clusters[name].pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@contextlib.asynccontextmanager
async def running(syncer: Syncer) -> AsyncIterator[None]:
    """``syncer.run()`` as a daemon runs, stopped and drained on the way out."""
    async with syncer:
        task = asyncio.create_task(syncer.run())
        try:
            yield
        finally:
            syncer.request_stop()
            await asyncio.wait_for(task, 60)


def syncer_for(local: str, remotes: dict[str, str], topic: str) -> Syncer:
    return Syncer(make_config(local, remotes, [topic], copier=SMALL_CHUNKS))


async def test_the_gap_comes_from_every_remote_that_is_ahead(
    local: str, east: str, west: str, topic: str
) -> None:
    await create_topic(east, topic)
    await fill(east, topic, 1000)
    await mirror(east, west, topic)
    await fill(west, topic, 1000, start=1000)  # west is 1000 records further ahead
    syncer = syncer_for(local, {"east": east, "west": west}, topic)
    async with syncer:
        await syncer.catch_up()
    (status,) = syncer.statuses()
    assert status.state is State.CAUGHT_UP and status.local_end == 2000
    assert status.served.get("east", 0) > 0 and status.served.get("west", 0) > 0
    assert syncer.memory.used == 0 and syncer.memory.peak > 0  # every fetched byte released
    assert await partition_digests(local, topic) == await partition_digests(west, topic)


async def test_a_remote_that_disagrees_is_dropped_and_reported(
    local: str, east: str, west: str, topic: str
) -> None:
    await create_topic(east, topic)
    await create_topic(west, topic)
    await fill(east, topic, 600, tag=b"a")
    await fill(west, topic, 600, tag=b"b")  # same offsets, other records
    syncer = syncer_for(local, {"east": east, "west": west}, topic)
    async with syncer:
        await syncer.catch_up()
    (status,) = syncer.statuses()
    assert status.state is State.CAUGHT_UP and status.local_end == 600
    assert list(status.dropped) == ["west"]
    assert status.dropped["west"].startswith("records differ from remote east's at offset")
    assert await read_partition(local, topic) == await read_partition(east, topic)


@pytest.fixture
async def doomed(tmp_path: Path, testbed: Testbed) -> AsyncIterator[Testbed]:
    """A cluster of its own, to be killed."""
    bed = Testbed(tmp_path / "doomed", testbed.jars)
    await asyncio.to_thread(bed.up, [ClusterSpec("doomed")])
    try:
        yield bed
    finally:
        await asyncio.to_thread(bed.down)


async def test_a_remote_killed_mid_copy_loses_its_chunks_to_the_other(
    local: str, west: str, topic: str, doomed: Testbed
) -> None:
    victim = doomed.clusters["doomed"].bootstrap
    await create_topic(victim, topic, 2)
    for partition in (0, 1):
        await produce(
            victim,
            topic,
            [(b"k%d" % i, b"x" * 2000) for i in range(4000)],
            partition=partition,
            linger_ms=20,
        )
    await mirror(victim, west, topic)
    config = make_config(
        local,
        {"doomed": victim, "west": west},
        [topic],
        copier={**SMALL_CHUNKS, "chunk_timeout_ms": 3000, "max_in_flight": 1},
    )
    syncer = Syncer(config)
    async with syncer:
        copying = asyncio.create_task(syncer.catch_up())
        while sum(s.served.get("doomed", 0) for s in syncer.statuses()) < 200_000:
            assert not copying.done(), "the copy ended before the remote could be killed"
            await asyncio.sleep(0.05)
        await asyncio.to_thread(doomed.clusters["doomed"].kill)
        await asyncio.wait_for(copying, 180)
    statuses = syncer.statuses()
    assert all(s.state is State.CAUGHT_UP and s.local_end == 4000 for s in statuses)
    assert sum(s.served.get("doomed", 0) for s in statuses) >= 200_000
    assert sum(s.served.get("west", 0) for s in statuses) > 0
    for partition in (0, 1):
        assert await partition_digests(local, topic, partition) == await partition_digests(
            west, topic, partition
        )


async def test_a_remote_that_stops_answering_while_ahead_hands_over_to_one_seen_behind(
    local: str, east: str, west: str, topic: str, testbed: Testbed
) -> None:
    """east holds 0..1999, west (a mirror of it) 0..999 when the copy starts: 1000.. come
    from east alone, slowly (east capped), and west's end is not looked at again (a remote's
    end is learned from its fetch answers, and west is not fetched from past its end). West
    catches up with east mid-copy, then east stops answering (SIGSTOP). Before 2026-12-07
    the partition waited for east, however long: west was last seen ending at 1000, below
    the local end, and only remotes seen holding the local end or ending there are fetched
    from. Now the copier lists west's ends, finds it holds the rest, and copies it from
    west while east stays stopped: every record equal to west's (kcat too)."""
    await create_topic(east, topic)
    await fill(east, topic, 1000)
    await mirror(east, west, topic)
    await fill(east, topic, 1000, start=1000)
    config = make_config(
        local,
        {"east": east, "west": west},
        [topic],
        copier={**SMALL_CHUNKS, "chunk_timeout_ms": 3000},
    )
    slow = dataclasses.replace(  # ~310 kB from 1000 on, 8 kB a fetch: ~15 s at this cap
        config.remotes[0], max_bytes_per_second=20_000, request_timeout_ms=3000
    )
    config = dataclasses.replace(config, remotes=(slow, *config.remotes[1:]))
    syncer = Syncer(config)
    async with running(syncer):
        await until(lambda: (first_status(syncer, "local_end") or 0) > 1100, "1100", 60)
        await mirror(east, west, topic)  # west now holds all 2000
        assert (first_status(syncer, "local_end") or 0) < 1900, "copied before east stopped"
        with paused(testbed, "east"):
            await until(lambda: first_status(syncer, "local_end") == 2000, "west's rest", 60)
    (status,) = syncer.statuses()
    assert status.state is not State.HALTED, status.error
    assert not status.dropped, status.dropped
    assert status.served.get("west", 0) > 0, status.served
    assert await partition_digests(local, topic) == await partition_digests(west, topic)
    assert kcat_lines(local, topic, 0) == kcat_lines(west, topic, 0)


async def test_a_remote_away_leaves_its_topics_as_they_were_and_the_others_are_refreshed(
    local: str, east: str, west: str, topic: str, testbed: Testbed
) -> None:
    """``topic.both`` is held by east and west, ``topic.west`` (created while east is
    paused) by west alone. Before 2026-12-07 a refresh failed as a whole while any remote
    did not answer: no new topic, partition or setting from the others until it did. Now
    east's topics are left as they were (copied on from west), and west's new topic is
    created and copied; once east answers again, the refresh uses it."""
    both, only_west = f"{topic}.both", f"{topic}.west"
    await create_topic(east, both)
    await fill(east, both, 200)
    await mirror(east, west, both)
    config = make_config(
        local,
        {"east": east, "west": west},
        [rf"{topic}\..*"],
        topics={"include": [rf"{topic}\..*"], "refresh_interval_s": 0.5},
        copier={"chunk_timeout_ms": 3000},
    )
    quick = partial(dataclasses.replace, request_timeout_ms=3000)  # a paused east: 3 s
    config = dataclasses.replace(config, remotes=tuple(map(quick, config.remotes)))
    syncer = Syncer(config)

    def end_of(name: str) -> int | None:
        return next((s.local_end for s in syncer.statuses() if s.tp.topic == name), None)

    async with running(syncer):
        await until(lambda: end_of(both) == 200, f"{both} copied", 60)
        with paused(testbed, "east"):
            # (paused between a refresh's census and its settings read, that read is
            # retried for up to 60 s before the refresh fails; the next census marks it)
            await until(lambda: "east" in syncer.topics.down, "east seen away", 100)
            await create_topic(west, only_west)
            await fill(west, only_west, 100)
            await fill(west, both, 50, start=200)  # west, a mirror, goes on without east
            await until(lambda: end_of(only_west) == 100, f"{only_west} copied", 60)
            await until(lambda: end_of(both) == 250, f"{both} copied on from west", 60)
            assert both not in syncer.refused and only_west not in syncer.refused
        await until(lambda: not syncer.topics.down, "east answering again", 60)
    assert all(s.state is not State.HALTED for s in syncer.statuses())
    for name in (both, only_west):
        assert await partition_digests(local, name) == await partition_digests(west, name)
        assert kcat_lines(local, name, 0) == kcat_lines(west, name, 0)


async def recreate(bootstrap: str, topic: str, count: int, tag: bytes) -> None:
    """Delete ``topic`` and create it again holding ``count`` records of another history."""
    await delete_topic(bootstrap, topic)
    await asyncio.sleep(2)  # the broker finishes deleting before the name is reused
    await create_topic(bootstrap, topic)
    await fill(bootstrap, topic, count, tag=tag)


async def test_a_remote_recreated_with_another_history_is_dropped_and_the_rest_serve(
    local: str, east: str, west: str, topic: str
) -> None:
    await create_topic(east, topic)
    await fill(east, topic, 800)
    await mirror(east, local, topic)  # local holds the first 800 records
    await fill(east, topic, 200, start=800)
    await mirror(east, west, topic)  # east and west hold the same 1,000
    before = await read_partition(west, topic)
    await recreate(east, topic, 1500, tag=b"n")  # east: 1,500 records of another history
    syncer = syncer_for(local, {"east": east, "west": west}, topic)
    async with syncer:
        await syncer.catch_up()
    (status,) = syncer.statuses()
    assert status.state is State.CAUGHT_UP, status.error
    assert list(status.dropped) == ["east"]
    # east disagrees with the local log at 799, or (when west's chunk came back first and
    # was written) with what was written from west just before east's chunk starts
    why = status.dropped["east"]
    assert "differ from the local log's at offset 799" in why or (
        "written from remote west at offset" in why
    ), why
    assert status.local_end == 1000 and status.served.get("east", 0) == 0
    assert await read_partition(local, topic) == before  # west's, offset by offset


async def test_when_every_remote_disagrees_with_the_local_log_the_partition_halts(
    local: str, east: str, west: str, topic: str
) -> None:
    await create_topic(east, topic)
    await fill(east, topic, 800)
    await mirror(east, local, topic)
    before = await read_partition(local, topic)
    await create_topic(west, topic)
    await fill(west, topic, 1200, tag=b"w")  # never the local log's history
    await recreate(east, topic, 1500, tag=b"n")
    syncer = syncer_for(local, {"east": east, "west": west}, topic)
    async with syncer:
        await syncer.catch_up()
    (status,) = syncer.statuses()
    assert status.state is State.HALTED and status.error is not None
    assert "differs from remote" in status.error and "deleted and recreated" in status.error
    assert sorted(status.dropped) == ["east", "west"]
    assert await read_partition(local, topic) == before  # nothing written


async def test_two_remotes_that_diverge_mid_gap_never_interleave(
    local: str, east: str, west: str, topic: str
) -> None:
    await create_topic(east, topic)
    await fill(east, topic, 1300)
    await mirror(east, local, topic)  # local holds 1,300 records
    await fill(east, topic, 400, start=1300)
    await mirror(east, west, topic)  # east and west hold the same 1,700
    # then they diverge: past the comparisons at the local end, between samples
    await fill(east, topic, 1000, tag=b"e", start=1700)
    await fill(west, topic, 1000, tag=b"w", start=1700)
    syncer = syncer_for(local, {"east": east, "west": west}, topic)
    async with syncer:
        await syncer.catch_up()
    (status,) = syncer.statuses()
    assert status.state is State.CAUGHT_UP, status.error
    assert len(status.dropped) == 1, status.dropped  # the one that disagrees with what was written
    (kept,) = {"east", "west"} - set(status.dropped)
    expected = await read_partition({"east": east, "west": west}[kept], topic)
    assert await read_partition(local, topic) == expected  # one history, offset by offset


async def test_a_remote_of_another_history_is_compared_on_every_partition_of_a_request(
    local: str, east: str, west: str, topic: str
) -> None:
    """The comparisons of many partitions starting at once share fetch requests; a broker
    sends a batch over a partition's limit only for the first partition of an answer that
    has records (KIP-74), so each partition's comparison must get its own batch whole, not
    take a cut slice for "nothing to compare" and write another history on top."""
    partitions = 8
    await create_topic(east, topic, partitions)
    await create_topic(west, topic, partitions)
    for p in range(partitions):
        await produce(east, topic, [(b"k%d" % i, b"e" * 300) for i in range(300)], partition=p)
        await produce(west, topic, [(b"k%d" % i, b"w" * 300) for i in range(600)], partition=p)
    await mirror(east, local, topic)  # local: east's history, 300 records a partition
    before = [await read_partition(local, topic, p) for p in range(partitions)]
    syncer = syncer_for(local, {"west": west}, topic)  # west never held it
    async with syncer:
        await syncer.catch_up()
    statuses = syncer.statuses()
    assert len(statuses) == partitions
    for status in statuses:
        assert status.state is State.HALTED, (status.tp, status.state, status.local_end)
        assert "differs from remote west" in (status.error or ""), status.error
    assert [await read_partition(local, topic, p) for p in range(partitions)] == before
    if shutil.which("kcat"):  # an independent reader: east's records only, each partition
        for p in range(partitions):
            lines = await asyncio.to_thread(kcat_lines, local, topic, p)
            assert len(lines) == 300 and lines[-1] == f"299 k299 {'e' * 300}", lines[-1][:20]


@pytest.mark.parametrize("grouped", [False, True], ids=["alone", "in-a-group"])
async def test_a_remote_that_holds_a_topic_only_later_serves_its_copiers(
    local: str, east: str, west: str, topic: str, testbed: Testbed, grouped: bool
) -> None:
    """The topic is held by east alone when its copier is made; west gets it later (a
    mirror of east). Before 2026-12-07 a copier's remotes were fixed when it was made: with
    east then away, what west holds past the local end was never copied. Now the topic's
    copiers start again with west (so also for a remote away when they were made); in a
    group, by the member that owns them."""
    await create_topic(east, topic)
    await fill(east, topic, 200)
    group = {"coordination": {"group": f"g-{topic}"}} if grouped else {}
    config = make_config(
        local,
        {"east": east, "west": west},
        [topic],
        topics={"include": [topic], "refresh_interval_s": 0.5},
        copier={"chunk_timeout_ms": 3000, "shutdown_timeout_s": 10},
        **group,
    )
    quick = partial(dataclasses.replace, request_timeout_ms=3000)  # a paused east: 3 s
    config = dataclasses.replace(config, remotes=tuple(map(quick, config.remotes)))
    syncer = Syncer(config)

    def end() -> int | None:
        return next((s.local_end for s in syncer.statuses()), None)

    def served_by(name: str) -> bool:
        return any(name in c.fetchers for c in syncer.copiers.values())

    async with running(syncer):
        await until(lambda: end() == 200, "east's records copied", 60)
        assert not served_by("west")
        await mirror(east, west, topic)  # west now holds the same 200 records
        await until(lambda: served_by("west"), "a copier fetching from west", 30)
        with paused(testbed, "east"):
            await fill(west, topic, 50, start=200)  # west, a mirror, goes on without east
            await until(lambda: end() == 250, "west's rest", 60)
    (status,) = syncer.statuses()
    assert status.state is not State.HALTED, status.error
    assert status.served.get("west", 0) > 50 * 300, status.served  # bytes: all 50 records
    assert await partition_digests(local, topic) == await partition_digests(west, topic)
    assert kcat_lines(local, topic, 0) == kcat_lines(west, topic, 0)


async def test_a_remote_down_at_start_is_left_out_and_joins_once_it_answers(
    local: str, west: str, topic: str, doomed: Testbed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One of two remotes is down as the daemon starts (a restart during a remote's
    outage). Before 2026-12-07 the start failed (exit 4), so nothing was copied from the
    remote that answered either. Now the daemon copies from west, tries the other again,
    and once it answers takes it in: its topics' copiers start again with it, and a topic
    only it holds is created and copied."""
    monkeypatch.setattr(syncer_module, "REACH_RETRY_S", 1.0)
    late = doomed.clusters["doomed"]
    own = f"{topic}.own"  # held by the late remote alone
    await create_topic(west, topic)
    await fill(west, topic, 300)
    await mirror(west, late.bootstrap, topic)  # the same 300 records, at the same offsets
    await create_topic(late.bootstrap, own)
    await fill(late.bootstrap, own, 100)
    await asyncio.to_thread(late.stop)
    config = make_config(
        local,
        {"late": late.bootstrap, "west": west},
        [topic, own],
        topics={"include": [topic, own], "refresh_interval_s": 300},  # taken in at once
        copier=SMALL_CHUNKS,
    )
    syncer = Syncer(config)

    def end(of: str = topic) -> int | None:
        return next((s.local_end for s in syncer.statuses() if s.tp.topic == of), None)

    def shown(name: str) -> str:
        return next(r.state for r in syncer.snapshot().remotes if r.name == name)

    async with running(syncer):
        assert list(syncer.clusters.unreachable) == ["late"]
        assert shown("late") == "left out at start" and shown("west") != shown("late")
        await until(lambda: end() == 300, "west's records copied", 60)
        await asyncio.to_thread(doomed.restart, "doomed")  # stopped already: started
        await fill(late.bootstrap, topic, 50, start=300)  # held by the late remote alone
        await until(lambda: end() == 350, "the late remote's records", 60)
        await until(lambda: end(own) == 100, "the late remote's own topic", 30)
        assert not syncer.clusters.unreachable and shown("late") != "left out at start"
        assert list(syncer.remotes) == ["late", "west"]  # the configuration's order
    status, mine = (next(s for s in syncer.statuses() if s.tp.topic == t) for t in (topic, own))
    assert status.state is not State.HALTED, status.error
    assert status.served.get("late", 0) >= 50 * 300, status.served  # bytes: all 50 records
    assert mine.state is not State.HALTED and mine.served.get("late", 0) >= 100 * 300
    for t in (topic, own):
        assert await partition_digests(local, t) == await partition_digests(late.bootstrap, t)
        assert kcat_lines(local, t, 0) == kcat_lines(late.bootstrap, t, 0)


async def test_a_catch_up_or_a_start_with_no_remote_answering_fails_unreachable(
    local: str, west: str, topic: str, doomed: Testbed
) -> None:
    """A one-shot catch-up copies to the ends seen at its start: with a remote missing
    they are not known, so it fails as before (exit 4). So does a start with no remote
    answering (a wrong address, most likely), and a member of a group with any remote
    away (the group hands out only the topics every member mirrors)."""
    late = doomed.clusters["doomed"]
    await create_topic(west, topic)
    await asyncio.to_thread(late.stop)
    both = Syncer(make_config(local, {"late": late.bootstrap, "west": west}, [topic]))
    async with both:
        with pytest.raises(UnreachableError, match="remote cluster 'late'"):
            await both.catch_up()
    with pytest.raises(UnreachableError, match="remote cluster 'late'"):
        async with Syncer(make_config(local, {"late": late.bootstrap}, [topic])):
            pass
    grouped = make_config(
        local,
        {"late": late.bootstrap, "west": west},
        [topic],
        coordination={"group": f"g-{topic}"},
    )
    with pytest.raises(UnreachableError, match="remote cluster 'late'"):
        async with Syncer(grouped):
            pass


async def test_a_topic_gone_or_recreated_at_one_remote_drops_it_while_another_holds_it(
    local: str, east: str, west: str, topic: str
) -> None:
    """east and west hold the same two topics. While the daemon copies, west deletes ``b``
    (seen gone), then deletes and recreates both with another, longer history and two
    partitions (``a``'s id changes unseen between two looks). Before 2026-12-07 the local
    ``a`` halted then, though east still held the log it copies, and west's failing fetches
    of a gone ``b`` went on. Now west is dropped for each, saying why; neither its new logs'
    records nor their partition count are followed (counted, the remotes would disagree on
    it and the topic be refused), and both go on from east. The looks at the topics are the
    test's own (``refresh_topics``, the daemon's is ten minutes away), so that ``a`` is never
    seen gone."""
    a, b = f"{topic}.a", f"{topic}.b"
    for name in (a, b):
        await create_topic(east, name)
        await fill(east, name, 300)
        await mirror(east, west, name)
    config = make_config(
        local,
        {"east": east, "west": west},
        [rf"{topic}\..*"],
        topics={"include": [rf"{topic}\..*"], "refresh_interval_s": 600},
        copier=SMALL_CHUNKS | {"shutdown_timeout_s": 10},
    )
    syncer = Syncer(config)

    def status(name: str) -> PartitionStatus:
        return next(s for s in syncer.statuses() if s.tp.topic == name)

    def ends() -> list[int]:
        return sorted(s.local_end for s in syncer.statuses())

    async with running(syncer):
        await until(lambda: ends() == [300, 300], "300 records of each copied", 60)
        await delete_topic(west, b)
        await asyncio.sleep(2)  # the broker finishes deleting before the name is reused
        await syncer.refresh_topics()
        assert list(status(b).dropped) == ["west"] and not status(a).dropped
        await fill(east, b, 100, start=300)
        await until(lambda: status(b).local_end == 400, "b copied on from east", 60)
        await delete_topic(west, a)
        await asyncio.sleep(2)
        for name in (a, b):
            await create_topic(west, name, partitions=2)
            await fill(west, name, 600, tag=b"w")  # ahead of local: copied, were it used
        await syncer.refresh_topics()
        for name, start in ((a, 300), (b, 400)):
            await fill(east, name, 100, start=start)
        await until(lambda: ends() == [400, 500], "both copied on from east", 60)
        assert not syncer.halted_topics and not syncer.topics.refused
        shown = status_document(syncer.snapshot())["topics"]["remotes_dropped"]
        metrics = exposition(syncer.instruments.attach(syncer.snapshot)).decode()
    assert shown == {a: {"west": status(a).dropped["west"]}, b: {"west": status(b).dropped["west"]}}
    for name in (a, b):
        assert f'syncer_topic_remote_dropped{{remote="west",topic="{name}"}} 1.0' in metrics
    recreated, gone = status(a).dropped["west"], status(b).dropped["west"]
    assert f"topic {a} was deleted and recreated on the remote west cluster" in recreated
    assert f"topic {b} was deleted on the remote west cluster" in gone
    for why in (recreated, gone):
        assert "not used for this topic any more: remote east holds the log copied" in why
    for name in (a, b):
        assert status(name).state is not State.HALTED, status(name).error
        assert list(status(name).dropped) == ["west"]
        assert await read_partition(local, name) == await read_partition(east, name)
        assert kcat_lines(local, name, 0) == kcat_lines(east, name, 0)
