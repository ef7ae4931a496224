"""The copier's own decisions on plain values (the ones over a partition's remotes are in
test_partition): how long it waits before resuming from the local end after an error, and
what a stop asked for in the middle of a chunk still sends."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from syncer import copier as copier_module
from syncer.batches import Batch, split_batches
from syncer.chunk_types import Chunk, Fetched
from syncer.clusters import TP, FetchedPartition
from syncer.coalesce import NotAnswered
from syncer.config import CopierConfig
from syncer.copier import PartitionCopier
from syncer.errors import OffsetOutOfRange, PartitionHalted, TransientClusterError
from syncer.holes import RemoteEnds
from syncer.identity import WriterIdentity
from syncer.partition import PartitionSources
from syncer.retry import next_backoff
from syncer.sources import SourceHealth
from syncer.status import PartitionStatus
from syncer.writes import Sent
from tests.unit.test_holes import batch

CONFIG = CopierConfig(retry_backoff_ms=200, retry_backoff_max_ms=1_000)


def test_errors_in_a_row_with_nothing_copied_double_the_wait_up_to_the_cap() -> None:
    waits = [0.2]
    for _ in range(4):
        waits.append(next_backoff(waits[-1], False, CONFIG))
    assert waits == [0.2, 0.4, 0.8, 1.0, 1.0]


def test_records_copied_since_the_last_error_start_the_wait_over() -> None:
    assert next_backoff(0.8, True, CONFIG) == 0.2
    assert next_backoff(1.0, True, CONFIG) == 0.2


def test_the_first_error_ever_waits_the_first_step() -> None:
    assert next_backoff(0.0, False, CONFIG) == 0.2


def test_an_error_after_a_healthy_stretch_longer_than_the_cap_starts_the_wait_over() -> None:
    # issue 19: the first error after a long run waited out what was left of an old backoff
    assert next_backoff(1.0, False, CONFIG, healthy_s=1.5) == 0.2
    assert next_backoff(1.0, False, CONFIG, healthy_s=0.5) == 1.0  # not healthy for long
    assert next_backoff(0.4, False, CONFIG, healthy_s=0.5) == 0.8


def test_a_leader_that_moved_is_retried_after_the_first_step_however_many_came_before() -> None:
    waits = [1.0]
    for _ in range(3):
        waits.append(next_backoff(waits[-1], False, CONFIG, leader_moved=True))
    assert waits == [1.0, 0.2, 0.2, 0.2]
    # and the errors after it grow from there again if nothing is copied
    assert next_backoff(waits[-1], False, CONFIG) == 0.4


class Chunks:
    def stop_polling(self) -> None:
        pass


async def test_a_stop_asked_for_during_a_back_off_ends_the_wait_at_once() -> None:
    # issue 19: a revoked copier sleeping out a 6.4 s back-off held its whole group's
    # rebalance that long; the wait itself is the copier's, so it is driven directly
    copier = object.__new__(PartitionCopier)
    copier._stopping = False
    copier._stop_requested = asyncio.Event()
    copier.chunks = Chunks()  # type: ignore[assignment]
    pausing = asyncio.create_task(copier._pause(30))
    await asyncio.sleep(0.01)
    assert not pausing.done()
    started = time.monotonic()
    copier.request_stop()
    await asyncio.wait_for(pausing, 1)
    assert time.monotonic() - started < 0.5


async def test_a_back_off_without_a_stop_lasts_its_time() -> None:
    copier = object.__new__(PartitionCopier)
    copier._stop_requested = asyncio.Event()
    started = time.monotonic()
    await copier._pause(0.05)
    assert time.monotonic() - started >= 0.05


class GatedWrites:
    """A partition's writes as the copier sees them: ``room()`` waits for the test to open
    it, once per batch; what was submitted is kept."""

    def __init__(self) -> None:
        self.gate = asyncio.Queue[None]()
        self.sent: list[int] = []
        self.writes: list[Sent] = []
        self.coalescing = False  # each batch a write of its own (copier.coalesce_bytes 0)

    async def room(self) -> None:
        await self.gate.get()

    def submit(self, sent: Sent, raw: bytes | bytearray) -> None:
        self.sent.append(sent.base_offset)
        self.writes.append(sent)


def writing_copier(writes: GatedWrites) -> PartitionCopier:
    copier = object.__new__(PartitionCopier)
    copier.tp = TP("t", 0)
    copier._stopping = False
    copier._stop_requested = asyncio.Event()
    copier.chunks = Chunks()  # type: ignore[assignment]
    copier.writes = writes  # type: ignore[assignment]
    copier.identity = WriterIdentity(producer_id=7, producer_epoch=0)
    copier.status = PartitionStatus(copier.tp)
    copier.fill_holes = False
    return copier


def fetched(batches: list[Batch]) -> Fetched:
    records = b"".join(bytes(b.raw) for b in batches)
    end = batches[-1].next_offset
    partition = FetchedPartition(0, end, end, 0, (), records)
    return Fetched(Chunk(0, end, "east"), partition, batches, end, 0)


async def test_a_stop_asked_for_while_a_chunk_is_written_sends_none_of_the_rest() -> None:
    # a revoked copier writing the rest of a chunk of ~500 small batches one at a time
    # (acks=all, its producer state unproven after a local broker's kill) drained for 22 to
    # 33 s, and the whole group's rebalance waited for it
    writes = GatedWrites()
    copier = writing_copier(writes)
    got = fetched([batch(offset, 5) for offset in range(0, 50, 5)])
    writing = asyncio.create_task(copier._write(got, 0))
    for _ in range(3):
        writes.gate.put_nowait(None)
    while len(writes.sent) < 3:
        await asyncio.sleep(0)
    copier.request_stop()
    writes.gate.put_nowait(None)  # the fourth batch's room comes after the stop
    frontier = await asyncio.wait_for(writing, 1)
    assert writes.sent == [0, 5, 10]
    assert frontier == 15  # where the next owner resumes (the local end will say so too)


async def test_a_chunk_written_with_no_stop_is_sent_whole() -> None:
    writes = GatedWrites()
    copier = writing_copier(writes)
    got = fetched([batch(offset, 5) for offset in range(0, 50, 5)])
    for _ in range(10):
        writes.gate.put_nowait(None)
    assert await asyncio.wait_for(copier._write(got, 0), 1) == 50
    assert writes.sent == list(range(0, 50, 5))


def timed_batch(base: int, timestamps: list[int]) -> Batch:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=1, producer_epoch=0,
        base_sequence=0, batch_size=1 << 20,
    )  # fmt: skip
    for i, timestamp in enumerate(timestamps):
        builder.append(i, timestamp=timestamp, key=b"k", value=b"v", headers=[])
    raw = bytearray(builder.build())
    raw[0:8] = base.to_bytes(8, "big")  # not under the CRC
    (parsed,) = split_batches(bytes(raw))
    return parsed


async def test_each_write_counts_the_max_timestamp_of_the_records_it_holds() -> None:
    """The broker keeps our producer state from the max timestamp of the batch written (its
    expiry counts from it), and answers a duplicate of the batch with it: a write trimmed at
    the local end holds less than its source batch, whose max came before the trim."""
    writes = GatedWrites()
    copier = writing_copier(writes)
    got = fetched([timed_batch(0, [100, 900, 200, 300, 400]), timed_batch(5, [500, 600])])
    for _ in range(2):
        writes.gate.put_nowait(None)
    assert await asyncio.wait_for(copier._write(got, 2), 1) == 7
    assert [(s.base_offset, s.max_timestamp) for s in writes.writes] == [(2, 400), (5, 600)]


class NotedAgreement:
    def __init__(self) -> None:
        self.local_checks = 0

    def local_checked(self) -> None:
        self.local_checks += 1


async def test_records_found_landed_and_identical_make_the_agreement_compare_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Writes whose answers were lost, found landed and identical to the reference remote's
    (``_check_landed``): the agreement forgets what it noted as written last (a write sent
    again from another remote is answered as a duplicate of what landed)."""
    found: list[Any] = [None]

    async def check_landed(*_args: Any) -> Any:
        return found[0]

    monkeypatch.setattr(copier_module, "check_landed", check_landed)
    copier = writing_copier(GatedWrites())
    copier.sources = SimpleNamespace(  # type: ignore[assignment]
        landed_reference=lambda: "east", remotes=("east",), usable=lambda: {"east": None}
    )
    copier.fetchers = {"east": SimpleNamespace(lanes=[SimpleNamespace(cluster=None)])}  # type: ignore[dict-item]
    copier.local = None  # type: ignore[assignment]
    agreement = NotedAgreement()
    copier.agreement = agreement  # type: ignore[assignment]
    await copier._check_landed(10, 20)
    assert agreement.local_checks == 1
    found[0] = SimpleNamespace(describe=lambda: "record from remote offset 10 differs")
    with pytest.raises(PartitionHalted, match="differs"):
        await copier._check_landed(10, 20)
    assert agreement.local_checks == 1


class DroppingAgreement(NotedAgreement):
    def __init__(self) -> None:
        super().__init__()
        self.dropped: dict[str, str] = {}

    def drop(self, remote: str, reason: str) -> None:
        self.dropped[remote] = reason


DIFFERS = SimpleNamespace(describe=lambda: "local offset 10 holds a record the source does not")


def comparing_copier(
    monkeypatch: pytest.MonkeyPatch,
    answers: dict[str, Any],
    ends: dict[str, RemoteEnds] | None = None,
) -> tuple[PartitionCopier, DroppingAgreement, list[str]]:
    """A copier whose landed check finds, per remote (the first is the reference), what
    ``answers`` says: None (identical), a difference, or an error raised; and the remotes
    asked, in order. Each remote is seen holding 0..99 unless ``ends`` says otherwise."""
    asked: list[str] = []

    async def check_landed(_local: Any, source: str, *_args: Any) -> Any:
        asked.append(source)
        answer = answers[source]
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(copier_module, "check_landed", check_landed)
    copier = writing_copier(GatedWrites())
    names = tuple(answers)
    held = {n: RemoteEnds(0, 100) for n in names}
    held.update(ends or {})
    copier.sources = SimpleNamespace(  # type: ignore[assignment]
        landed_reference=lambda: names[0], remotes=names, usable=lambda: held
    )
    copier.fetchers = {n: SimpleNamespace(lanes=[SimpleNamespace(cluster=n)]) for n in names}  # type: ignore[misc]
    copier.local = None  # type: ignore[assignment]
    agreement = DroppingAgreement()
    copier.agreement = agreement  # type: ignore[assignment]
    return copier, agreement, asked


async def test_records_landed_unseen_that_are_another_remotes_drop_the_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A write whose answer was lost left east's records; the same offsets, sent again from
    west (another history there), were answered as a repeat. west, the reference (furthest
    ahead), differs from the local log there, east holds it: west is dropped, as the
    agreement drops a remote that differs from the local log, and the copy goes on."""
    copier, agreement, asked = comparing_copier(monkeypatch, {"west": DIFFERS, "east": None})
    await copier._check_landed(10, 20)
    assert asked == ["west", "east"]
    assert list(agreement.dropped) == ["west"]
    assert "at 10..19, which are remote east's" in agreement.dropped["west"]
    assert agreement.local_checks == 1


async def test_records_landed_unseen_that_no_remote_holds_halt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    copier, agreement, asked = comparing_copier(monkeypatch, {"west": DIFFERS, "east": DIFFERS})
    with pytest.raises(PartitionHalted, match="holds a record the source does not"):
        await copier._check_landed(10, 20)
    assert asked == ["west", "east"] and not agreement.dropped and not agreement.local_checks


async def test_a_remote_that_might_hold_records_landed_unseen_is_waited_for_not_halted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One that did not answer may hold them: tried again later, nothing dropped; one that
    did not answer does not keep another that holds them from deciding."""
    away = TransientClusterError("east: RequestTimedOutError")
    copier, agreement, _ = comparing_copier(monkeypatch, {"west": DIFFERS, "east": away})
    with pytest.raises(TransientClusterError, match="no answer from the others"):
        await copier._check_landed(10, 20)
    assert not agreement.dropped and not agreement.local_checks
    answers = {"west": DIFFERS, "east": away, "north": None}
    copier, agreement, asked = comparing_copier(monkeypatch, answers)
    await copier._check_landed(10, 20)
    assert asked == ["west", "east", "north"] and list(agreement.dropped) == ["west"]


async def test_only_remotes_seen_holding_what_landed_are_asked_and_out_of_range_is_no(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A remote seen ending below what landed (or starting above it) is not asked (it would
    answer out of range, or with nothing, and nothing compared is no match); one that
    answers out of range all the same holds no such records: the next one is asked."""
    answers = {"west": DIFFERS, "north": None, "south": None, "east": None}
    short = {"north": RemoteEnds(0, 15), "south": RemoteEnds(15, 100)}
    copier, agreement, asked = comparing_copier(monkeypatch, answers, short)
    await copier._check_landed(10, 20)
    assert asked == ["west", "east"] and list(agreement.dropped) == ["west"]
    gone = OffsetOutOfRange("north: fetch at 10: OffsetOutOfRangeError")
    answers = {"west": DIFFERS, "north": gone, "east": None}
    copier, agreement, asked = comparing_copier(monkeypatch, answers)
    await copier._check_landed(10, 20)
    assert asked == ["west", "north", "east"] and list(agreement.dropped) == ["west"]
    copier, agreement, asked = comparing_copier(monkeypatch, {"west": DIFFERS, "north": gone})
    with pytest.raises(PartitionHalted):
        await copier._check_landed(10, 20)


async def test_a_reference_that_no_longer_holds_what_landed_is_not_dropped_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reference's log starts past what landed now (retention): another remote that
    holds it tells; none: a halt that says so, not an internal error."""
    gone = OffsetOutOfRange("west: fetch at 10: OffsetOutOfRangeError")
    copier, agreement, asked = comparing_copier(monkeypatch, {"west": gone, "east": None})
    await copier._check_landed(10, 20)
    assert asked == ["west", "east"] and not agreement.dropped and agreement.local_checks == 1
    copier, agreement, asked = comparing_copier(monkeypatch, {"west": gone, "east": gone})
    with pytest.raises(PartitionHalted, match="no remote holds those offsets any more"):
        await copier._check_landed(10, 20)


async def test_records_landed_unseen_that_are_the_references_ask_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = {"west": None, "east": AssertionError("not asked")}
    copier, agreement, asked = comparing_copier(monkeypatch, answers)
    await copier._check_landed(10, 20)
    assert asked == ["west"] and not agreement.dropped and agreement.local_checks == 1


class Listed:
    """A remote's ``stable_ends`` as the copier asks it: ``ends``, or an error, or never
    answered (``hang``); the partitions asked kept in ``asked``."""

    def __init__(self, ends: tuple[int, int] | Exception | None) -> None:
        self.ends = ends
        self.asked: list[TP] = []

    async def stable_ends(self, tp: TP) -> tuple[int, int]:
        self.asked.append(tp)
        if self.ends is None:
            await asyncio.Event().wait()  # never answers
        if isinstance(self.ends, Exception):
            raise self.ends
        return self.ends


def listing_copier(remotes: dict[str, Listed], seen: dict[str, tuple[int, int]]) -> PartitionCopier:
    """A copier of partition t[0] whose remotes were last seen at ``seen``; the first of them
    backs off (it died while ahead)."""
    copier = writing_copier(GatedWrites())
    health = {n: SourceHealth(n, rank) for rank, n in enumerate(seen)}
    health[next(iter(seen))].failed(time.monotonic(), "RequestTimedOutError")
    ends = {n: RemoteEnds(*e) for n, e in seen.items()}
    copier.sources = PartitionSources(copier.tp, health, ends)
    copier.fetchers = {  # type: ignore[assignment]
        n: SimpleNamespace(lanes=[SimpleNamespace(cluster=c)]) for n, c in remotes.items()
    }
    copier._list_after = 0.0
    return copier


async def test_a_partition_that_waits_lists_the_remotes_seen_behind_it_at_most_every_few_s() -> (
    None
):
    """east died while ahead (seen to 2000), west was last seen at 1000, below the local end
    1500: west's ends are listed and found at 2000, and the copy goes on (True) with west's
    end known. A second look within ``LIST_BEHIND_S`` lists nothing; east, backing off, is
    never listed."""
    west = Listed((0, 2000))
    copier = listing_copier(
        {"east": Listed((0, 2000)), "west": west}, {"east": (0, 2000), "west": (0, 1000)}
    )
    assert await copier._listed_ahead(1500) is True
    assert copier.sources.ends["west"] == RemoteEnds(0, 2000)
    assert west.asked == [copier.tp] and copier.fetchers["east"].lanes[0].cluster.asked == []
    copier.sources.update_end("west", RemoteEnds(0, 1000))
    assert await copier._listed_ahead(1500) is False  # too soon
    assert west.asked == [copier.tp]
    copier._list_after = 0.0
    west.ends = (0, 1200)  # still behind: learned, and the copier waits on
    assert await copier._listed_ahead(1500) is False
    assert copier.sources.ends["west"] == RemoteEnds(0, 1200)


async def test_a_listing_that_fails_or_hangs_tells_nothing_and_a_stop_ends_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A listing left out (its partition led nowhere, or by a broker that did not answer)
    or not answered tells nothing, and backs nothing off: the remote's fetches tell its
    health. Nor does a stop, which ends the wait at once."""
    monkeypatch.setattr(copier_module, "LIST_WAIT_S", 0.2)
    seen = {"east": (0, 2000), "west": (0, 1000)}
    left_out = listing_copier({"east": Listed(None), "west": Listed(NotAnswered(TP("t", 0)))}, seen)
    assert await left_out._listed_ahead(1500) is False
    assert left_out.sources.ends["west"] == RemoteEnds(0, 1000)  # nothing learned
    assert left_out.sources.health("west").healthy(time.monotonic())

    hanging = listing_copier({"east": Listed(None), "west": Listed(None)}, seen)
    started = time.monotonic()
    assert await hanging._listed_ahead(1500) is False  # given up after LIST_WAIT_S
    assert 0.15 < time.monotonic() - started < 1.0
    assert hanging.sources.health("west").healthy(time.monotonic())

    monkeypatch.setattr(copier_module, "LIST_WAIT_S", 30.0)
    stopped = listing_copier({"east": Listed(None), "west": Listed(None)}, seen)
    listing = asyncio.create_task(stopped._listed_ahead(1500))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    stopped.request_stop()
    assert await asyncio.wait_for(listing, 1) is False
    assert time.monotonic() - started < 0.5


async def test_a_listing_is_taken_only_where_the_remote_holds_the_local_end() -> None:
    """west's start moved past the local end (retention): it cannot serve 1500, and taken,
    its ends would read as 1500..1599 gone at every remote while east, which backs off at
    the local end, may get them: the partition would halt for good. Seen ending at the local end
    (its ranges wait to be fetched again), west is listed too; holding nothing past it, it
    is no reason to go on at once."""
    seen = {"east": (0, 1500), "west": (0, 1000)}
    moved = listing_copier({"east": Listed(None), "west": Listed((1600, 2500))}, seen)
    assert await moved._listed_ahead(1500) is False
    assert moved.sources.ends["west"] == RemoteEnds(0, 1000)
    assert moved.sources.stuck(1500) is None

    at = listing_copier(
        {"east": Listed(None), "west": Listed((0, 1500))}, {"east": (0, 2000), "west": (0, 1500)}
    )
    assert await at._listed_ahead(1500) is False
    assert at.fetchers["west"].lanes[0].cluster.asked == [at.tp]
    at._list_after = 0.0
    at.fetchers["west"].lanes[0].cluster.ends = (0, 1600)
    assert await at._listed_ahead(1500) is True
