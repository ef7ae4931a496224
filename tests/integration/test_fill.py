"""Policy fill against real brokers: a compacted source with gaps and a transactional source
with committed and aborted transactions are copied with every offset aligned, filler records
exactly at the holes; and below thousands of fillers, a remote recreated with another history
is still compared with the local log's last real record before anything of it is written."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import TopicPartition

from syncer.batches import FILLER_HEADER, filler_batches, is_filler
from syncer.clusters import TP
from syncer.metrics import SyncerCollector
from syncer.status import PartitionStatus, State, status_document
from syncer.syncer import Syncer
from tests.integration.test_faults import delete_topic
from tests.kafka_helpers import (
    Rec,
    catch_up,
    create_topic,
    delete_records,
    kcat_lines,
    make_config,
    produce,
    produce_transactions,
    read_partition,
)


async def catch_up_filling(local: str, east: str, topic: str) -> Syncer:
    topics = {"include": [topic], "fill": [topic]}
    return await catch_up(make_config(local, {"east": east}, [topic], topics=topics))


async def read_committed(bootstrap: str, topic: str) -> list[Rec]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed"
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]  # the last stable offset
        out: list[Rec] = []
        while await consumer.position(tp) < end:
            for m in (await consumer.getmany(tp, timeout_ms=2000)).get(tp, []):
                out.append(
                    Rec(m.offset, m.key, m.value, tuple(m.headers), m.timestamp, m.timestamp_type)
                )
        return out
    finally:
        await consumer.stop()


async def stop_compacting(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        config = {"cleanup.policy": "delete", "retention.ms": "-1"}
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, config)])
    finally:
        await admin.close()
    await asyncio.sleep(2)  # a cleaning under way finishes


async def test_transactional_source_reads_the_same_at_the_same_offsets(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    await produce(east, topic, [(b"plain", b"%d" % i) for i in range(5)])
    await produce_transactions(
        east,
        topic,
        [
            (True, [(b"t", b"committed %d" % i) for i in range(3)]),
            (False, [(b"t", b"aborted %d" % i) for i in range(4)]),
            (True, [(b"t", b"committed again")]),
        ],
    )
    await produce(east, topic, [(b"plain", b"after")])

    syncer = await catch_up_filling(local, east, topic)
    (status,) = syncer.statuses()
    remote_all = await read_partition(east, topic)  # what the log holds, aborted data too
    end = remote_all[-1].offset + 1
    assert status.state is State.CAUGHT_UP and status.local_end == end
    # 5 plain, 3 committed + marker, 4 aborted + marker, 1 committed + marker, 1 plain
    assert end == 17
    seen_remote = await read_committed(east, topic)
    local_all = await read_partition(local, topic)
    assert [r.offset for r in local_all] == list(range(end))  # every offset holds a record
    local_real = [r for r in local_all if not is_filler(r.key, r.headers)]
    assert local_real == seen_remote  # what a read_committed consumer sees, offset for offset
    fillers = {r.offset: dict(r.headers)[FILLER_HEADER] for r in local_all if r not in local_real}
    aborted = {r.offset for r in remote_all if r.value and r.value.startswith(b"aborted")}
    assert {o for o, why in fillers.items() if why == b"aborted"} == aborted
    markers = set(range(end)) - {r.offset for r in remote_all}
    assert {o for o, why in fillers.items() if why == b"marker"} == markers
    assert len(markers) == 3 and status.filled == len(fillers) == 7
    assert status_document(syncer.snapshot())["partitions"][0]["filled"] == 7
    (family,) = [
        m for m in SyncerCollector(syncer.snapshot).collect() if m.name.endswith("filled_offsets")
    ]
    assert [sample.value for sample in family.samples if sample.name.endswith("_total")] == [7]


async def test_compacted_source_with_gaps_keeps_every_offset(
    local: str, east: str, topic: str
) -> None:
    await create_topic(
        east,
        topic,
        **{
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
        },
    )
    for round_ in range(4):  # each key rewritten: compaction removes the older ones
        await produce(east, topic, [(b"k%d" % (i % 7), b"r%d-%d" % (round_, i)) for i in range(20)])
        await asyncio.sleep(0.3)  # the next write rolls the segment
    remote: list[Rec] = []
    for _ in range(120):
        await produce(east, topic, [(b"roll", b"x")])  # keeps rolling segments
        remote = await read_partition(east, topic)
        offsets = [r.offset for r in remote]
        if len(offsets) < offsets[-1] + 1 - 10:  # a good part compacted away
            break
        await asyncio.sleep(0.5)
    await stop_compacting(east, topic)  # so that the source stays as compared below
    remote = await read_partition(east, topic)
    end = remote[-1].offset + 1
    holes = set(range(end)) - {r.offset for r in remote}
    assert holes, "the broker did not compact the source in time"

    syncer = await catch_up_filling(local, east, topic)
    (status,) = syncer.statuses()
    by_offset = {r.offset: r for r in remote}
    local_all = await read_partition(local, topic)
    assert status.state is State.CAUGHT_UP and [r.offset for r in local_all] == list(
        range(status.local_end)
    )
    assert status.local_end >= end
    for r in local_all:
        source = by_offset.get(r.offset)
        if source is None:
            assert is_filler(r.key, r.headers), r  # a filler exactly at each hole
        else:
            assert r == source  # the record itself, at its own offset
    assert status.filled == sum(1 for r in local_all if is_filler(r.key, r.headers)) >= len(holes)


async def aligned_catch_up(
    local: str, east: str, topic: str
) -> tuple[PartitionStatus, tuple[int, int]]:
    """A catch-up with ``align_start``: the partition's status, and its local start and end."""
    config = make_config(
        local, {"east": east}, [topic], topics={"include": [topic], "align_start": True}
    )
    syncer = Syncer(config)
    async with syncer:
        await syncer.catch_up()
        (status,) = syncer.statuses()
        ends = await syncer.local.ends([TopicPartition(topic, 0)])
    return status, ends[TopicPartition(topic, 0)]


async def remote_starting_at_40(east: str, topic: str) -> None:
    """A remote partition of 100 records whose first 40 were deleted."""
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"%d" % i) for i in range(100)])
    await delete_records(east, topic, 40)


async def test_align_start_makes_an_empty_local_partition_start_where_the_remote_does(
    local: str, east: str, topic: str
) -> None:
    await remote_starting_at_40(east, topic)
    status, ends = await aligned_catch_up(local, east, topic)
    assert status.state is State.CAUGHT_UP, status.error
    assert ends == (40, 100)  # local start and end = the remote's
    assert await read_partition(local, topic) == await read_partition(east, topic)


@pytest.mark.parametrize("filled", [15, 40], ids=["cut-while-filling", "cut-before-deleting"])
async def test_an_alignment_cut_short_is_finished_at_the_next_start(
    local: str, east: str, topic: str, filled: int
) -> None:
    """The alignment of the test above cut short, as a failed write, a lost answer, a failed
    DeleteRecords or a stop leaves it: the local partition holds this deployment's fillers
    for ``[0, filled)`` and still starts at 0. The next start writes the fillers still
    missing and deletes below the remote's start: the local start and end are the remote's
    and the records equal (before: "records 15..39 are gone at every remote", a halt at
    every start; with all 40 written, the copy went on from 40 and the local log kept
    starting at 0)."""
    await remote_starting_at_40(east, topic)
    await create_topic(local, topic)
    config = make_config(
        local, {"east": east}, [topic], topics={"include": [topic], "align_start": True}
    )
    cut_short = Syncer(config)
    async with cut_short:  # the deployment's writer and identity, no copier
        who = cut_short._identity
        assert who is not None and cut_short._writer is not None
        now_ms = int(time.time() * 1000)
        fillers = filler_batches(
            0, filled, now_ms, "below-start", who.producer_id, who.producer_epoch
        )
        for base, _end, raw in fillers:
            written = await cut_short._writer.submit(TP(topic, 0), raw)
            assert (written.error_code, written.base_offset) == (0, base)
    status, ends = await aligned_catch_up(local, east, topic)
    assert status.state is State.CAUGHT_UP, status.error
    assert ends == (40, 100)
    assert await read_partition(local, topic) == await read_partition(east, topic)
    kcat = await asyncio.to_thread(kcat_lines, local, topic, 0)
    assert [line.split(" ")[0] for line in kcat] == [str(o) for o in range(40, 100)]


async def test_a_local_log_with_a_real_record_below_the_remote_start_is_not_aligned(
    local: str, east: str, topic: str
) -> None:
    """``align_start`` never deletes records of the local log: one that holds a real record
    below the start every remote has moved past halts as data lost, as without it."""
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"%d" % i) for i in range(100)])
    await create_topic(local, topic)
    await produce(local, topic, [(b"k", b"0")])  # not a filler
    await delete_records(east, topic, 40)
    status, ends = await aligned_catch_up(local, east, topic)
    assert status.state is State.HALTED
    assert "records 1..39 are gone at every remote" in (status.error or "")
    assert ends == (0, 1)


async def test_a_transactional_remote_recreated_with_another_history_halts_under_fill(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    await produce(east, topic, [(b"plain", b"%d" % i) for i in range(5)])
    await produce_transactions(
        east, topic, [(True, [(b"t", b"committed %d" % i) for i in range(3)])]
    )
    syncer = await catch_up_filling(local, east, topic)
    (status,) = syncer.statuses()
    assert status.local_end == 9  # the last local offset is a filler: the commit marker's
    before = await read_partition(local, topic)
    await delete_topic(east, topic)
    await asyncio.sleep(2)
    await create_topic(east, topic)  # the same name, another log, longer than the copy
    await produce(east, topic, [(b"new", b"%d" % i) for i in range(30)])
    syncer = await catch_up_filling(local, east, topic)
    (status,) = syncer.statuses()
    assert status.state is State.HALTED and status.error is not None
    assert "the local record at offset 7 differs from remote east's" in status.error
    assert await read_partition(local, topic) == before  # nothing of the new log appended


ABORTED = 4_200  # more than the first windows look below the frontier (4,096 offsets)


async def test_a_recreated_remote_is_compared_below_thousands_of_fillers(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"old-%d" % i) for i in range(10)])
    aborted = [(b"k", b"aborted-%d" % i) for i in range(ABORTED)]
    await produce_transactions(east, topic, [(False, aborted)])
    end = 10 + ABORTED + 1  # the abort marker
    first = await catch_up_filling(local, east, topic)
    assert [(s.state, s.local_end) for s in first.statuses()] == [(State.CAUGHT_UP, end)]
    before = await read_partition(local, topic)

    # a new process (no topic id remembered) meets the remote topic recreated: another history,
    # longer than the copy, whose records at the copy's offsets differ
    await delete_topic(east, topic)
    await asyncio.sleep(2)
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"new-%d" % i) for i in range(end + 100)])
    second = await catch_up_filling(local, east, topic)
    (status,) = second.statuses()
    assert status.state is State.HALTED, status
    assert status.error is not None and "the local record at offset 9 differs" in status.error
    assert await read_partition(local, topic) == before  # nothing of the new history spliced
