"""The core promise against real brokers: every record lands at its remote offset, restarts
resume from the local end, two writers never duplicate, holes halt one partition only."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from syncer import mirroring
from syncer.status import State, status_document
from syncer.syncer import Syncer
from tests.kafka_helpers import (
    batch_layout,
    create_topic,
    delete_records,
    kcat_lines,
    make_config,
    produce,
    produce_every_kind,
    produce_transactions,
    read_partition,
    record_codecs,
    single_record_batches,
    until,
)
from tests.kafka_helpers import (
    catch_up as caught_up,
)


async def catch_up(local: str, remotes: dict[str, str], include: list[str]) -> Syncer:
    return await caught_up(make_config(local, remotes, include))


async def test_every_record_kind_lands_at_its_remote_offset(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    written = await produce_every_kind(east, topic)
    syncer = await catch_up(local, {"east": east}, [topic])
    remote = await read_partition(east, topic)
    copied = await read_partition(local, topic)
    assert len(copied) == written
    assert copied == remote  # offset, key, value, headers, timestamp, timestamp type
    assert await record_codecs(local, topic) == await record_codecs(east, topic)  # codecs kept
    compressed = [b for b in await batch_layout(east, topic) if b[2] != "none"]
    assert compressed == [b for b in await batch_layout(local, topic) if b[2] != "none"]
    (status,) = syncer.statuses()
    assert status.state is State.CAUGHT_UP and status.local_end == written


async def test_small_batches_are_coalesced_each_record_at_its_remote_offset(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    await single_record_batches(east, topic, [(b"k%d" % i, b"v" * (i % 300)) for i in range(120)])
    syncer = await catch_up(local, {"east": east}, [topic])
    assert await read_partition(local, topic) == await read_partition(east, topic)
    if shutil.which("kcat"):  # an independent reader
        assert kcat_lines(local, topic, 0) == kcat_lines(east, topic, 0)
    layout = await batch_layout(local, topic)
    assert len(await batch_layout(east, topic)) == 120
    assert len(layout) < 10  # not a produce request per record
    (status,) = syncer.statuses()
    assert status.state is State.CAUGHT_UP and status.local_end == 120
    # every local batch holding one source batch is one not coalesced
    assert 120 - len(layout) <= status.coalesced <= 120
    assert status_document(syncer.snapshot())["partitions"][0]["coalesced_batches"] == (
        status.coalesced
    )


async def test_a_coalesced_batch_the_local_topic_refuses_as_too_large_goes_batch_by_batch(
    local: str, east: str, topic: str
) -> None:
    # the remote takes batches of up to 2,000 bytes (copied to the local topic): each source
    # batch fits (1.2 KB), two of them coalesced do not
    await create_topic(east, topic, **{"max.message.bytes": "2000"})
    await single_record_batches(east, topic, [(b"k%d" % i, b"v" * 1200) for i in range(60)])
    syncer = await catch_up(local, {"east": east}, [topic])
    (status,) = syncer.statuses()
    assert status.state is State.CAUGHT_UP and status.local_end == 60
    assert status.errors == {"resync": 1}  # once; then each batch alone
    assert status.coalesced == 0  # the refused write is not counted
    assert await read_partition(local, topic) == await read_partition(east, topic)
    assert await batch_layout(local, topic) == await batch_layout(east, topic)


async def test_creates_local_topic_with_partitions_and_copied_configs(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic, 3, **{"retention.ms": "7200000", "cleanup.policy": "delete"})
    for p in range(3):
        await produce(east, topic, [(b"k", b"v%d" % i) for i in range(10 * (p + 1))], partition=p)
    syncer = await catch_up(local, {"east": east}, [topic])
    assert [s.local_end for s in syncer.statuses()] == [10, 20, 30]
    async with syncer.local:
        configs = await syncer.local.topic_configs(topic, ["retention.ms", "cleanup.policy"])
    assert configs["retention.ms"] == "7200000"


async def test_a_second_catch_up_copies_only_the_gap(local: str, east: str, topic: str) -> None:
    await create_topic(east, topic)
    await produce(east, topic, [(b"a", b"%d" % i) for i in range(100)])
    first = await catch_up(local, {"east": east}, [topic])
    assert first.summary().records == 100
    await produce(east, topic, [(b"b", b"%d" % i) for i in range(50)])
    second = await catch_up(local, {"east": east}, [topic])
    assert second.summary().records == 50
    assert await read_partition(local, topic) == await read_partition(east, topic)


async def test_a_catch_up_reads_each_record_from_the_remote_once(
    local: str, east: str, topic: str
) -> None:
    """A catch-up takes each chunk in its task; a chunk taken as its answer came was left to
    the task, and the fetches launched then went from the frontier again: the remote served
    each chunk twice (the second thrown away). Fetched bytes are now about those copied."""
    await create_topic(east, topic)
    for i in range(40):  # 40 batches of ~50 KB, ~16 chunks of 128 KiB
        await produce(east, topic, [(b"k", b"%d-%d" % (i, j) + b"v" * 1000) for j in range(50)])
    copier = {"shutdown_timeout_s": 10, "partition_fetch_max_bytes": 128 * 1024}
    syncer = await caught_up(make_config(local, {"east": east}, [topic], copier=copier))
    (status,) = syncer.statuses()
    assert status.state is State.CAUGHT_UP and status.local_end == 2000
    assert await read_partition(local, topic) == await read_partition(east, topic)
    fetched = sum(sum(r.fetched_by_node.values()) for r in syncer.snapshot().remotes)
    assert status.bytes_copied <= fetched <= 1.25 * status.bytes_copied, (fetched, status)


@pytest.mark.parametrize("coalesce_bytes", [0, 65536], ids=["alone", "coalesced"])
async def test_two_copiers_on_one_partition_write_each_offset_once(
    local: str, east: str, topic: str, coalesce_bytes: int
) -> None:
    await create_topic(east, topic)
    # many small batches, so the two writers interleave (coalesced: in writes cut wherever
    # each copier's fetches ended, which the broker's sequence must fence as well)
    for i in range(40):
        await produce(east, topic, [(b"k", b"%d-%d" % (i, j)) for j in range(25)])
    copier = {"shutdown_timeout_s": 10, "coalesce_bytes": coalesce_bytes}
    one = Syncer(make_config(local, {"east": east}, [topic], copier=copier))
    two = Syncer(make_config(local, {"east": east}, [topic], copier=copier))
    async with one, two:
        await asyncio.gather(one.catch_up(), two.catch_up())
    remote = await read_partition(east, topic)
    copied = await read_partition(local, topic)
    assert len(copied) == 1000
    assert copied == remote
    assert {s.state for s in one.statuses() + two.statuses()} == {State.CAUGHT_UP}


async def test_transaction_marker_halts_that_partition_only(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic, 2)
    await produce(east, topic, [(b"plain", b"%d" % i) for i in range(10)], partition=1)
    await produce(east, topic, [(b"before", b"%d" % i) for i in range(5)], partition=0)
    await produce_transactions(east, topic, [(True, [(b"t", b"in txn %d" % i) for i in range(3)])])
    syncer = await catch_up(local, {"east": east}, [topic])
    halted, finished = syncer.statuses()
    assert halted.state is State.HALTED
    assert halted.error is not None and "hole at offset 8: transaction marker" in halted.error
    assert halted.local_end == 8  # the plain records and the committed data before the marker
    assert finished.state is State.CAUGHT_UP and finished.local_end == 10
    assert await read_partition(local, topic, 1) == await read_partition(east, topic, 1)
    copied = await read_partition(local, topic, 0)
    assert [(r.offset, r.value) for r in copied] == [
        (r.offset, r.value) for r in (await read_partition(east, topic, 0))[:8]
    ]


async def test_partition_count_mismatch_is_refused_and_others_go_on(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic + ".bad", 2)
    await create_topic(local, topic + ".bad", 3)
    await create_topic(east, topic + ".good", 1)
    await produce(east, topic + ".good", [(b"k", b"v")] * 5)
    syncer = await catch_up(local, {"east": east}, [topic + r"\..*"])
    assert syncer.refused == {topic + ".bad": "partition counts differ: local has 3, remote has 2"}
    (good,) = syncer.statuses()
    assert good.tp.topic == topic + ".good" and good.local_end == 5


async def test_a_topic_the_local_cluster_refuses_to_create_is_refused_and_others_go_on(
    local: str, east: str, topic: str
) -> None:
    """The local cluster refuses to create one topic for good (here its name collides with
    a local topic's, '.' against '_'; a creation policy or a setting it does not take
    likewise): that topic is refused with the broker's reason, the others are copied (it
    stopped the whole process with exit 1, at every start)."""
    await create_topic(local, topic + "_bad")  # the operator's own
    await create_topic(east, topic + ".bad")
    await create_topic(east, topic + ".good")
    await produce(east, topic + ".good", [(b"k", b"v")] * 5)
    syncer = await catch_up(local, {"east": east}, [topic + r"\..*"])
    why = syncer.refused[topic + ".bad"]
    assert why.startswith("the local cluster refused to create it: InvalidTopicError")
    assert "collides" in why and list(syncer.refused) == [topic + ".bad"]
    (good,) = syncer.statuses()
    assert good.tp.topic == topic + ".good" and good.local_end == 5


async def test_a_daemon_creating_topics_a_share_at_a_time_gets_past_one_refused(
    local: str, east: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon creates new topics a share at a time, first by name, and looks again at once
    while some wait (here a share is one partition). The first topic is refused by the local
    cluster: it is asked again only after a refresh interval, so the next share is the next
    topic (the same refused one was picked at every look, in a loop, and the rest never
    created)."""
    monkeypatch.setattr(mirroring, "CREATE_PER_REFRESH", 1)
    await create_topic(local, topic + "_a")  # the operator's: the remote's topic.a collides
    await create_topic(east, topic + ".a")
    await create_topic(east, topic + ".b")
    await produce(east, topic + ".b", [(b"k", b"v")] * 5)
    config = make_config(
        local,
        {"east": east},
        [topic + r"\..*"],
        topics={"include": [topic + r"\..*"], "refresh_interval_s": 30},
    )
    syncer = Syncer(config)
    async with syncer:
        running = asyncio.create_task(syncer.run())
        await until(lambda: any(s.local_end == 5 for s in syncer.statuses()), "topic .b copied", 30)
        assert list(syncer.refused) == [topic + ".a"]
        syncer.request_stop()
        await asyncio.wait_for(running, 30)


async def test_daemon_picks_up_new_topics_and_stops_cleanly(
    local: str, east: str, topic: str
) -> None:
    config = make_config(
        local,
        {"east": east},
        [topic + r"\..*"],
        topics={"include": [topic + r"\..*"], "refresh_interval_s": 0.5},
    )
    await create_topic(east, topic + ".a")
    await produce(east, topic + ".a", [(b"a", b"%d" % i) for i in range(20)])
    syncer = Syncer(config)
    async with syncer:
        running = asyncio.create_task(syncer.run())
        await create_topic(east, topic + ".b", 2)
        await produce(east, topic + ".b", [(b"b", b"%d" % i) for i in range(30)], partition=1)
        await produce(east, topic + ".a", [(b"a2", b"%d" % i) for i in range(5)])
        for _ in range(100):
            ends = {(s.tp.topic, s.tp.partition): s.local_end for s in syncer.statuses()}
            if ends.get((topic + ".a", 0)) == 25 and ends.get((topic + ".b", 1)) == 30:
                break
            await asyncio.sleep(0.2)
        syncer.request_stop()
        summary = await asyncio.wait_for(running, 15)
    assert summary.records == 55
    for name, part in ((".a", 0), (".b", 1)):
        assert await read_partition(local, topic + name, part) == await read_partition(
            east, topic + name, part
        )


async def test_a_foreign_write_into_the_local_partition_halts_it(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"%d" % i) for i in range(10)])
    await catch_up(local, {"east": east}, [topic])
    await produce(local, topic, [(b"intruder", b"!")])  # lands at local offset 10
    for i in range(10, 20):  # one batch per record, so local end 11 is a batch border
        await produce(east, topic, [(b"k", b"%d" % i)])
    syncer = await catch_up(local, {"east": east}, [topic])
    (status,) = syncer.statuses()
    assert status.state is State.HALTED
    assert status.error is not None
    assert "the local record at offset 10 differs from remote east's" in status.error
    copied = await read_partition(local, topic)
    assert len(copied) == 11 and copied[10].key == b"intruder"  # nothing written after it


async def test_a_remote_start_beyond_the_local_end_is_data_loss(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"%d" % i) for i in range(10)])
    await delete_records(east, topic, 6)
    syncer = await catch_up(local, {"east": east}, [topic])
    (status,) = syncer.statuses()
    assert status.state is State.HALTED and status.local_end == 0
    assert status.error is not None and "records 0..5 are gone at every remote" in status.error


async def test_daemon_grows_a_local_topic_when_the_remote_gains_partitions(
    local: str, east: str, topic: str
) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions

    config = make_config(
        local, {"east": east}, [topic], topics={"include": [topic], "refresh_interval_s": 0.5}
    )
    await create_topic(east, topic, 1)
    await produce(east, topic, [(b"a", b"%d" % i) for i in range(5)])
    syncer = Syncer(config)
    async with syncer:
        running = asyncio.create_task(syncer.run())
        admin = AIOKafkaAdminClient(bootstrap_servers=east)
        await admin.start()
        try:
            await admin.create_partitions({topic: NewPartitions(total_count=3)})
        finally:
            await admin.close()
        await asyncio.sleep(1.0)
        await produce(east, topic, [(b"c", b"%d" % i) for i in range(7)], partition=2)
        for _ in range(100):
            ends = {s.tp.partition: s.local_end for s in syncer.statuses()}
            if ends.get(2) == 7 and ends.get(0) == 5:
                break
            await asyncio.sleep(0.2)
        syncer.request_stop()
        await asyncio.wait_for(running, 15)
    assert await read_partition(local, topic, 2) == await read_partition(east, topic, 2)


async def test_a_foreign_write_under_a_running_daemon_halts_at_the_misaligned_write(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"%d" % i) for i in range(10)])
    syncer = Syncer(make_config(local, {"east": east}, [topic]))
    async with syncer:
        running = asyncio.create_task(syncer.run())
        for _ in range(100):
            if syncer.statuses() and syncer.statuses()[0].local_end == 10:
                break
            await asyncio.sleep(0.1)
        await produce(local, topic, [(b"intruder", b"!")])  # local offset 10
        for i in range(10, 13):
            await produce(east, topic, [(b"k", b"%d" % i)])
        for _ in range(100):
            if syncer.statuses()[0].state is State.HALTED:
                break
            await asyncio.sleep(0.1)
        syncer.request_stop()
        await asyncio.wait_for(running, 15)
    (status,) = syncer.statuses()
    assert status.state is State.HALTED
    # the broker takes our next batch (our sequence still follows) one offset late: syncer
    # halts at once, naming both offsets (the first misplaced write, not one behind it), and
    # sends nothing more; batches already in flight behind it (remote 11 and 12, when they
    # came in the same fetch) land one late too
    assert status.error is not None
    assert "record from remote offset 10 landed at local offset 11" in status.error
    copied = await read_partition(local, topic)
    assert copied[10].key == b"intruder" and 12 <= len(copied) <= 14
    await asyncio.sleep(1)
    assert len(await read_partition(local, topic)) == len(copied)  # nothing after the halt
