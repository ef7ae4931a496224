"""The writes of one partition, judged in order: when a write may go behind others, what an
answer does to the confirmed end, what a settle finds among the answers still in flight, and
when the local end read after an error is believed. A stand-in writer hands out the futures
the test answers; a stand-in cluster says where the local end is."""

from __future__ import annotations

import asyncio
import time

import pytest

from syncer.alignment import (
    DUPLICATE_SEQUENCE,
    OUT_OF_ORDER_SEQUENCE,
    REQUEST_TIMED_OUT,
    StateClock,
)
from syncer.clusters import TP, ProduceResult
from syncer.errors import (
    ClusterError,
    LeaderMoved,
    MisalignedWrite,
    PartitionHalted,
    TransientClusterError,
)
from syncer.partition import PartitionSources
from syncer.protocol.common import (
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
)
from syncer.sources import SourceHealth
from syncer.status import PartitionStatus
from syncer.writes import (
    LandedCheck,
    PartitionWrites,
    Resync,
    Sent,
    lowered_state_clock,
    read_state_clock,
)

A = TP("t", 0)
DAY_MS = 86_400_000


class StandInWriter:
    def __init__(self) -> None:
        self.sent: list[asyncio.Future[ProduceResult]] = []
        self.forgotten = 0

    def submit(self, tp: TP, raw: bytes) -> asyncio.Future[ProduceResult]:
        future: asyncio.Future[ProduceResult] = asyncio.get_running_loop().create_future()
        self.sent.append(future)
        return future

    def forget(self, tp: TP) -> None:
        self.forgotten += 1


class StandInLocal:
    def __init__(self, end: int, log_end: int | None = None) -> None:
        self.timestamp_type = "CreateTime"  # the topic's message.timestamp.type
        self.settings_read = 0
        self.settings_fail: Exception | None = None  # the next read of the settings fails
        self.end = end  # the high watermark: what a reader sees
        self.log_end_at = log_end  # the leader's log end where it lies above that
        self.log_ends_read = 0
        self.fail_next: Exception | None = None  # the next read of the end fails with it
        self.leader_now: int | None = 1  # the node the metadata names as leader

    async def latest(self, tps: list[TP]) -> dict[TP, int]:
        if (error := self.fail_next) is not None:
            self.fail_next = None
            raise error
        return {tp: self.end for tp in tps}

    async def topic_settings(self, topics: list[str], keys: list[str]) -> dict[str, dict[str, str]]:
        self.settings_read += 1
        if (error := self.settings_fail) is not None:
            self.settings_fail = None
            raise error
        return {t: {"message.timestamp.type": self.timestamp_type} for t in topics}

    def known_leader(self, tp: TP) -> int | None:
        return self.leader_now

    async def log_end(self, tp: TP) -> int:
        self.log_ends_read += 1
        return self.end if self.log_end_at is None else max(self.end, self.log_end_at)


def writes(writer: StandInWriter, local: StandInLocal, expiry_ms: int = DAY_MS) -> PartitionWrites:
    return PartitionWrites(
        A,
        local,  # type: ignore[arg-type]
        writer,  # type: ignore[arg-type]
        PartitionStatus(A),
        PartitionSources(A, {"east": SourceHealth("east", 0)}),
        StateClock(expiry_ms),
        max_in_flight=5,
        retry_backoff_s=0.0,
    )


async def started(end: int = 0) -> tuple[StandInWriter, StandInLocal, PartitionWrites]:
    """Writes of a partition whose local log ends at ``end``, its end read and checked."""
    writer, local = StandInWriter(), StandInLocal(end)
    w = writes(writer, local)
    await w.checked_local_end(unreachable_check)
    return writer, local, w


def now_ms() -> int:
    return int(time.time() * 1000)


def batch(base: int, records: int = 10, age_ms: int = 0) -> Sent:
    return Sent(base, base + records, records, 100, "east", now_ms() - age_ms)


async def waits_for_room(w: PartitionWrites) -> asyncio.Future[None]:
    """``room()`` started; the test looks at whether it had to wait."""
    room = asyncio.ensure_future(w.room())
    await asyncio.sleep(0)
    return room


async def test_the_first_write_goes_alone_then_fresh_ones_are_pipelined() -> None:
    writer, local = StandInWriter(), StandInLocal(0)
    w = writes(writer, local)
    assert await w.checked_local_end(unreachable_check) == 0
    await w.room()
    w.submit(batch(0), b"raw")
    room = await waits_for_room(w)
    assert not room.done()  # no proof yet that the broker holds our producer state
    assert w.status.one_at_a_time
    writer.sent[0].set_result(ProduceResult(0, 0))
    await room
    assert w.confirmed == 10 and w.proven_at is not None
    w.submit(batch(10), b"raw")
    room = await waits_for_room(w)
    assert room.done() and not w.status.one_at_a_time  # proven and fresh: pipelined
    w.submit(batch(20), b"raw")
    for future in writer.sent[1:]:
        future.set_result(ProduceResult(0, 10 if future is writer.sent[1] else 20))
    await w.drain(0)
    assert w.confirmed == 30


async def test_records_older_than_the_expiry_go_one_at_a_time() -> None:
    writer, _local, w = await started()
    w.submit(batch(0, age_ms=2 * DAY_MS), b"raw")
    room = await waits_for_room(w)
    writer.sent[0].set_result(ProduceResult(0, 0))
    await room
    w.submit(batch(10, age_ms=2 * DAY_MS), b"raw")
    room = await waits_for_room(w)
    assert not room.done()  # it landed, but the state it left may be gone any moment
    assert w.status.one_at_a_time
    writer.sent[1].set_result(ProduceResult(0, 10))
    await room
    assert w.confirmed == 20


async def test_a_write_that_landed_counts_for_the_partition_and_its_remote() -> None:
    writer, _local, w = await started()
    w.submit(batch(0), b"raw")
    w.submit(batch(10), b"raw")
    writer.sent[0].set_result(ProduceResult(0, 0))
    writer.sent[1].set_result(ProduceResult(0, 3))  # elsewhere: counted nowhere
    await asyncio.sleep(0)
    east = w.sources.health("east")
    assert (east.served_bytes, east.served_records) == (100, 10)
    assert w.status.served == {"east": 100} and w.status.local_end == 10
    w.submit(Sent(20, 25, 5, 40, "", now_ms(), filled=5), b"raw")  # fillers of no remote
    writer.sent[2].set_result(ProduceResult(0, 20))
    await asyncio.sleep(0)
    assert (east.served_bytes, east.served_records) == (100, 10)
    assert w.status.filled == 5 and w.status.served == {"east": 100}
    # offsets copied (the fillers among them) come from the local end the answers moved
    assert w.status.records_copied == 25


async def test_writes_whose_answers_were_lost_count_once_the_local_end_is_read_back() -> None:
    """issue 19: the summary counted 77,888 records where 78,095 were copied."""
    writer, local, w = await started(40)
    w.submit(batch(40), b"raw")
    w.submit(batch(50), b"raw")
    writer.sent[0].set_result(ProduceResult(0, 40))
    writer.sent[1].set_exception(TransientClusterError("connection to the leader lost"))
    await asyncio.sleep(0)
    assert w.status.records_copied == 10
    await w.settle()
    local.end = 60  # the second one landed all the same

    async def check(low: int, high: int) -> None:
        pass

    assert await w.checked_local_end(check) == 60
    assert w.status.records_copied == 20 and w.status.local_end == 60


async def test_a_produce_answer_naming_a_moved_leader_is_retried_as_leader_moved() -> None:
    writer, _local, w = await started()
    w.submit(batch(0), b"raw")
    writer.sent[0].set_result(ProduceResult(NOT_LEADER_OR_FOLLOWER, -1))
    with pytest.raises(LeaderMoved):
        await w.drain(0)
    w.submit(batch(0), b"raw")
    writer.sent[1].set_result(ProduceResult(REQUEST_TIMED_OUT, -1))
    with pytest.raises(TransientClusterError) as timed_out:
        await w.drain(0)
    assert not isinstance(timed_out.value, LeaderMoved)  # that one backs off as it did


async def test_too_few_in_sync_replicas_is_retried_and_shown_until_a_write_lands() -> None:
    """issue 19: NOT_ENOUGH_REPLICAS waits (retriable, not a halt nor a refused sequence);
    the status says why until a write lands again."""
    writer, _local, w = await started()
    w.submit(batch(0), b"raw")
    writer.sent[0].set_result(ProduceResult(NOT_ENOUGH_REPLICAS, -1))
    with pytest.raises(TransientClusterError) as refused:
        await w.drain(0)
    assert not isinstance(refused.value, LeaderMoved)  # backs off: the ISR takes a while
    assert w.status.waiting == (
        "local NOT_ENOUGH_REPLICAS (in-sync replicas below min.insync.replicas)"
    )
    assert w.refused_at is None and w.confirmed == 0
    await w.settle()
    assert w.status.waiting is not None  # still waiting: nothing landed
    w.submit(batch(0), b"raw")
    writer.sent[1].set_result(ProduceResult(0, 0))
    await w.drain(0)
    assert w.status.waiting is None and w.waiting_since is None and w.confirmed == 10


async def test_a_write_appended_before_the_isr_shrank_is_read_back_not_sent_again() -> None:
    """NOT_ENOUGH_REPLICAS_AFTER_APPEND: the leader appended it (its high watermark covers
    it); the local end read next holds it, and what lies below is checked, not rewritten."""
    writer, local, w = await started()
    w.submit(batch(0), b"raw")
    w.submit(batch(10), b"raw")
    writer.sent[0].set_result(ProduceResult(NOT_ENOUGH_REPLICAS_AFTER_APPEND, -1))
    writer.sent[1].set_result(ProduceResult(NOT_ENOUGH_REPLICAS, -1))
    with pytest.raises(TransientClusterError):
        await w.drain(0)
    assert "NOT_ENOUGH_REPLICAS_AFTER_APPEND" in (w.status.waiting or "")
    await w.settle()
    local.end = 10  # the first was appended, the second refused
    checked: list[tuple[int, int]] = []

    async def check(low: int, high: int) -> None:
        checked.append((low, high))

    assert await w.checked_local_end(check) == 10  # the next write starts at 10
    assert checked == [(0, 10)] and w.confirmed == 10


async def test_a_write_unanswered_for_long_shows_what_the_partition_waits_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kafka 4 holds an acks=all write it appended while the ISR is below min ISR until the
    produce timeout: the status says so meanwhile, and once the request fails."""
    monkeypatch.setattr("syncer.writes.UNANSWERED_S", 0.01)
    writer, _local, w = await started()
    w.submit(batch(0), b"raw")
    draining = asyncio.ensure_future(w.drain(0))
    await asyncio.sleep(0.05)
    assert not draining.done()
    assert w.status.waiting == (
        "local write at offset 0 unanswered for over 0 s (acks=all: the leader waits for its"
        " in-sync replicas)"
    )
    writer.sent[0].set_exception(TransientClusterError("local: RequestTimedOutError"))
    with pytest.raises(TransientClusterError):
        await draining
    assert w.status.waiting == "local write at offset 0 unanswered: local: RequestTimedOutError"
    await w.settle()
    w.submit(batch(0), b"raw")
    writer.sent[1].set_result(ProduceResult(0, 0))
    await w.drain(0)
    assert w.status.waiting is None


async def test_a_write_answered_in_time_shows_no_wait() -> None:
    writer, _local, w = await started()
    w.submit(batch(0), b"raw")
    draining = asyncio.ensure_future(w.drain(0))
    await asyncio.sleep(0.01)
    writer.sent[0].set_result(ProduceResult(0, 0))
    await draining
    assert w.status.waiting is None and w.confirmed == 10


async def test_a_refusal_without_a_reason_of_its_own_is_shown_in_kafkas_words() -> None:
    writer, _local, w = await started()
    w.submit(batch(0), b"raw")
    # a retriable code the table of reasons does not name (Kafka's GROUP_LOAD_IN_PROGRESS)
    writer.sent[0].set_result(ProduceResult(14, -1))
    with pytest.raises(TransientClusterError):
        await w.drain(0)
    assert w.status.waiting == "local write at offset 0: GroupLoadInProgressError (error 14)"


async def test_a_write_that_landed_elsewhere_halts_naming_both_offsets() -> None:
    writer, _local, w = await started()
    w.submit(batch(0), b"raw")
    writer.sent[0].set_result(ProduceResult(0, 7))
    with pytest.raises(MisalignedWrite, match="remote offset 0 landed at local offset 7"):
        await w.drain(0)
    assert w.confirmed == 0


BROKER_TIME = 1_700_000_000_123  # a LogAppendTime topic's answer: the broker's clock


async def second_stamped_by_the_broker() -> PartitionWrites:
    """Two writes answered: the first as sent, the second stamped with the broker's time."""
    writer, _local, w = await started()
    w.submit(batch(0), b"raw")
    w.submit(batch(10), b"raw")
    writer.sent[0].set_result(ProduceResult(0, 0))
    writer.sent[1].set_result(ProduceResult(0, 10, None, BROKER_TIME))
    return w


def recorded() -> tuple[list[tuple[int, int]], LandedCheck]:
    """A landed check that notes the ranges it is asked to compare."""
    checked: list[tuple[int, int]] = []

    async def check(low: int, high: int) -> None:
        checked.append((low, high))

    return checked, check


async def test_a_write_stamped_with_the_brokers_time_halts_naming_its_offsets() -> None:
    """The answer's time is not the write's max timestamp: the broker's clock, or a repeat
    of a batch with other timestamps. The topic's setting tells: LogAppendTime halts."""
    w = await second_stamped_by_the_broker()
    with pytest.raises(Resync, match="answered with append time 1700000000123, not -1"):
        await w.drain(0)
    w.local.timestamp_type = "LogAppendTime"  # type: ignore[attr-defined]
    checked, check = recorded()
    with pytest.raises(PartitionHalted) as halted:
        await w.checked_local_end(check)
    assert not checked
    message = str(halted.value)
    assert message.startswith(
        "t[0]: the write of offsets 10..19 landed stamped with the local broker's time"
        " (1700000000123) in place of the source's timestamps"
    )
    assert "message.timestamp.type is now LogAppendTime" in message and "\n" not in message
    assert w.confirmed == 10  # the first landed as it was; the second is not the source's


async def test_a_time_not_ours_on_a_create_time_topic_is_a_repeat_checked() -> None:
    """The same answer on a topic still CreateTime: the broker took the write for a repeat
    of an earlier batch of ours with other timestamps (a lost write's, sent again from a
    remote with another history): what landed is compared, nothing halts."""
    w = await second_stamped_by_the_broker()
    with pytest.raises(Resync):
        await w.drain(0)
    local: StandInLocal = w.local  # type: ignore[assignment]
    local.end = 20
    checked, check = recorded()
    assert await w.checked_local_end(check) == 20
    assert checked == [(10, 20)] and w.confirmed == 20
    await w.checked_local_end(check)
    assert local.settings_read == 1  # told once: not asked again


async def test_a_setting_that_cannot_be_read_leaves_it_to_the_landed_check() -> None:
    """A refusal to describe the topic (no DescribeConfigs): what landed is compared all
    the same, and a difference there halts (the broker's clock differs from the source's
    timestamps)."""
    w = await second_stamped_by_the_broker()
    with pytest.raises(Resync):
        await w.drain(0)
    local: StandInLocal = w.local  # type: ignore[assignment]
    local.end = 20
    local.settings_fail = ClusterError("local: TOPIC_AUTHORIZATION_FAILED")
    checked, check = recorded()
    assert await w.checked_local_end(check) == 20
    assert checked == [(10, 20)]


async def test_a_write_answered_as_a_repeat_is_checked_not_confirmed() -> None:
    """A broker answers a batch it took before with our producer id, epoch and sequences
    with that batch's offsets and its cached max timestamp in the append time field (ours,
    not its clock's). It matches sequences, not records: the one it kept may hold another
    remote's records (a write whose answer was lost, sent again from a remote with another
    history). So the answer moves nothing; the writes resync and what landed is checked."""
    writer, local, w = await started()
    sent = batch(0)
    w.submit(sent, b"raw")
    writer.sent[0].set_result(ProduceResult(0, 0, None, sent.max_timestamp))
    with pytest.raises(Resync, match=r"write at offset 0 answered with append time \d+, not -1"):
        await w.drain(0)
    assert w.confirmed == 0 and w.proven_at is None
    assert w.status.local_end == 0 and w.status.bytes_copied == 0  # counted once checked
    local.end = 10
    checked, check = recorded()
    assert await w.checked_local_end(check) == 10
    assert checked == [(0, 10)] and w.confirmed == 10


async def test_no_write_behind_a_repeat_is_confirmed_judged_or_settled() -> None:
    """A repeat and the writes behind it move the confirmed end no further, whether the
    repeat is judged as answers come (``check_done``/``drain``, which raise) or by a
    settle: the local end read next is checked from where it stood."""
    for judged_first in (True, False):
        writer, local, w = await started()
        w.submit(batch(0), b"raw")
        writer.sent[0].set_result(ProduceResult(0, 0))
        await w.drain(0)
        repeat, behind = batch(10), batch(20)
        w.submit(repeat, b"raw")
        w.submit(behind, b"raw")
        writer.sent[1].set_result(ProduceResult(0, 10, None, repeat.max_timestamp))
        writer.sent[2].set_result(ProduceResult(0, 20))
        if judged_first:
            with pytest.raises(Resync):
                w.check_done()
        await w.settle()
        assert w.confirmed == 10
        local.end = 30
        checked, check = recorded()
        assert await w.checked_local_end(check) == 30
        assert checked == [(10, 30)]


async def test_settle_does_not_confirm_a_write_stamped_with_the_brokers_time() -> None:
    """Found by a settle, a write stamped with the broker's time halts at the next read of
    the local end just the same, once a failed read of the topic's setting is retried."""
    w = await second_stamped_by_the_broker()
    await w.settle()
    assert w.confirmed == 10
    local: StandInLocal = w.local  # type: ignore[assignment]
    local.timestamp_type = "LogAppendTime"
    local.settings_fail = TransientClusterError("local: DescribeConfigs timed out")
    checked, check = recorded()
    with pytest.raises(TransientClusterError):
        await w.checked_local_end(check)
    with pytest.raises(PartitionHalted, match=r"offsets 10\.\.19 landed stamped"):
        await w.checked_local_end(check)
    assert not checked and local.settings_read == 2


async def test_a_refused_sequence_resyncs_and_names_the_offset() -> None:
    writer, _local, w = await started()
    w.submit(batch(0), b"raw")
    writer.sent[0].set_result(ProduceResult(OUT_OF_ORDER_SEQUENCE, -1))
    with pytest.raises(Resync) as refused:
        await w.drain(0)
    assert refused.value.refused_at == 0


async def test_a_timed_out_write_is_retried_and_what_landed_is_checked() -> None:
    writer, local, w = await started()
    w.submit(batch(0), b"raw")
    writer.sent[0].set_result(ProduceResult(REQUEST_TIMED_OUT, -1))
    with pytest.raises(TransientClusterError):
        await w.drain(0)
    local.end = 10  # it landed all the same
    checked: list[tuple[int, int]] = []

    async def check(low: int, high: int) -> None:
        checked.append((low, high))

    assert await w.checked_local_end(check) == 10
    assert checked == [(0, 10)] and w.confirmed == 10
    assert w.proven_at is None  # the next write goes alone again


async def test_settle_judges_the_answers_still_in_flight() -> None:
    writer, _local, w = await started()
    w.submit(batch(0), b"raw")
    w.submit(batch(10), b"raw")
    writer.sent[0].set_result(ProduceResult(0, 0))
    writer.sent[1].set_result(ProduceResult(0, 3))  # a successor landed early
    with pytest.raises(MisalignedWrite, match="remote offset 10 landed at local offset 3"):
        await w.settle()
    assert writer.forgotten == 1  # nothing queued goes out


async def test_a_local_end_that_went_back_halts() -> None:
    _writer, local, w = await started(50)
    local.end = 0  # the local topic recreated, or an unclean election
    with pytest.raises(PartitionHalted, match="local end went back from 50 to 0"):
        await w.checked_local_end(unreachable_check)


async def unreachable_check(low: int, high: int) -> None:
    raise AssertionError(f"nothing to check, asked {low}..{high}")


async def test_room_now_says_what_room_would_wait_for() -> None:
    # the copier's step taken in the fetcher's turn (``room_now``) sends only what ``room``
    # would let through without a wait, counting each batch of the step in flight
    writer, _local, w = await started()
    assert w.room_now([now_ms()])  # nothing in flight: one write goes, proven or not
    assert not w.room_now([now_ms(), now_ms()])  # unproven: the second would wait
    w.submit(batch(0), b"raw")
    assert not w.room_now([now_ms()])
    writer.sent[0].set_result(ProduceResult(0, 0))
    await w.drain(0)
    fresh = [now_ms()] * 5
    assert w.room_now(fresh)  # proven and fresh: up to max_in_flight (5)
    assert not w.room_now([*fresh, now_ms()])
    w.submit(batch(10), b"raw")
    assert w.room_now(fresh[:4]) and not w.room_now(fresh)
    # a batch whose state may expire before the next arrives: nothing goes behind it
    assert not w.room_now([now_ms() - 2 * DAY_MS, now_ms()])
    assert w.room_now([now_ms(), now_ms() - 2 * DAY_MS])  # as ``room`` lets the last go
    room = await waits_for_room(w)
    assert room.done()  # and room agrees: one more fresh write goes now


# what a write whose answer was lost may leave above the high watermark -------------------


async def lost(w: PartitionWrites, writer: StandInWriter, sent: Sent, how: str = "waited") -> None:
    """``sent`` written and its answer lost, then the writes settled. ``how``: the loss met
    waiting for the answer (``drain``), or judging it as it came (``check_done``); the
    broker's own timeout answered (REQUEST_TIMED_OUT: it may have landed); the leader moved
    while it waited for its in-sync replicas (NOT_LEADER_OR_FOLLOWER: appended, perhaps
    taken by the new leader); or lost behind a write refused before it (found among those
    in flight as they settle)."""
    if how == "behind":
        w.submit(sent._replace(next_offset=sent.base_offset), b"raw")  # nothing of its own
        writer.sent[-1].set_result(ProduceResult(NOT_ENOUGH_REPLICAS, -1))  # not appended
    w.submit(sent, b"raw")
    answers = {"answered": REQUEST_TIMED_OUT, "moved": NOT_LEADER_OR_FOLLOWER}
    if how in (*answers, "duplicate"):  # "may have landed"; "the broker holds it already"
        code = answers.get(how, DUPLICATE_SEQUENCE)
        writer.sent[-1].set_result(ProduceResult(code, -1))
    else:
        writer.sent[-1].set_exception(TransientClusterError("request timed out"))
    with pytest.raises((TransientClusterError, Resync)):
        if how == "judged":
            w.check_done()
        else:
            await w.drain(0)
    await w.settle()


async def still_waiting(task: asyncio.Task[int]) -> None:
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done()


@pytest.fixture
def no_poll_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("syncer.writes.SETTLE_POLL_S", 0.0)


@pytest.mark.usefixtures("no_poll_wait")
@pytest.mark.parametrize("how", ["waited", "judged", "answered", "moved", "duplicate", "behind"])
async def test_a_lost_write_of_old_records_above_the_high_watermark_is_waited_for(
    how: str,
) -> None:
    """Its records two days old, the broker may hold no producer state for us by now and
    would take it again behind its own first copy: the local end is believed only once the
    high watermark covers the leader's log end, and what lies below it is checked."""
    writer, local, w = await started()
    await lost(w, writer, batch(0, age_ms=2 * DAY_MS), how)
    local.log_end_at = 10  # appended by the leader, not yet by every in-sync replica
    checked: list[tuple[int, int]] = []

    async def check(low: int, high: int) -> None:
        checked.append((low, high))

    reading = asyncio.ensure_future(w.checked_local_end(check))
    await still_waiting(reading)
    assert "offsets 0..9 appended but not yet taken" in (w.status.waiting or "")
    local.end = 10  # the followers took it
    assert await reading == 10
    assert checked == [(0, 10)] and w.confirmed == 10


@pytest.mark.usefixtures("no_poll_wait")
async def test_a_lost_write_the_broker_still_fences_is_sent_again_without_waiting() -> None:
    """Fresh records: the broker holds our producer state and answers a write sent again as
    a duplicate (or refuses its sequence), so nothing waits on the followers."""
    writer, local, w = await started()
    await lost(w, writer, batch(0))
    local.log_end_at = 10
    assert await w.checked_local_end(unreachable_check) == 0
    assert local.log_ends_read == 1  # at start only


@pytest.mark.usefixtures("no_poll_wait")
async def test_with_the_state_clock_unknown_a_lost_write_is_waited_for() -> None:
    writer, local = StandInWriter(), StandInLocal(0)
    w = writes(writer, local, expiry_ms=0)  # producer.id.expiration.ms not readable
    await w.checked_local_end(unreachable_check)
    await lost(w, writer, batch(0))
    local.log_end_at = 10
    reading = asyncio.ensure_future(w.checked_local_end(unreachable_check))
    await still_waiting(reading)
    reading.cancel()


@pytest.mark.usefixtures("no_poll_wait")
async def test_at_start_a_write_of_the_process_before_above_the_high_watermark_is_waited_for() -> (
    None
):
    writer, local = StandInWriter(), StandInLocal(0, log_end=5)
    w = writes(writer, local)
    reading = asyncio.ensure_future(w.checked_local_end(unreachable_check))
    await still_waiting(reading)
    local.end = 5
    assert await reading == 5 and w.confirmed == 5


@pytest.mark.usefixtures("no_poll_wait")
async def test_a_log_end_cut_back_by_a_new_leader_ends_the_wait() -> None:
    """A new leader without the records above the old one's high watermark: they are gone,
    and writing from the high watermark again lands nothing twice."""
    writer, local, w = await started()
    await lost(w, writer, batch(0, age_ms=2 * DAY_MS))
    local.log_end_at = 10
    reading = asyncio.ensure_future(w.checked_local_end(unreachable_check))
    await still_waiting(reading)
    local.log_end_at = None  # the new leader's log ends at its high watermark, 0
    assert await reading == 0


@pytest.mark.usefixtures("no_poll_wait")
async def test_a_stop_ends_the_wait_above_the_high_watermark() -> None:
    writer, local, w = await started()
    await lost(w, writer, batch(0, age_ms=2 * DAY_MS))
    local.log_end_at = 10
    stop = False
    reading = asyncio.ensure_future(w.checked_local_end(unreachable_check, lambda: stop))
    await still_waiting(reading)
    stop = True
    assert await reading == 0  # nothing is written after it


@pytest.mark.usefixtures("no_poll_wait")
async def test_a_read_that_fails_while_waiting_keeps_the_lost_write_waited_for() -> None:
    """The wait reads the ends again and again of a leader that just timed a write out: one
    read failing must not forget the write it waits for (the next resync waits again)."""
    writer, local, w = await started()
    await lost(w, writer, batch(0, age_ms=2 * DAY_MS))
    local.log_end_at = 10
    reading = asyncio.ensure_future(w.checked_local_end(unreachable_check))
    await still_waiting(reading)
    local.fail_next = TransientClusterError("connection to the leader lost")
    with pytest.raises(TransientClusterError):
        await reading
    await w.settle()
    again = asyncio.ensure_future(w.checked_local_end(unreachable_check))
    await still_waiting(again)
    again.cancel()


async def test_a_lost_write_that_ages_past_the_state_clock_before_the_next_write_resyncs() -> None:
    """Fresh when the local end was read (the broker fenced a write sent again), past the
    producer-state clock by the time the next write would go (a remote down meanwhile, say):
    that write is not sent; the local end is read again, and waited for there."""
    writer, local = StandInWriter(), StandInLocal(0)
    w = writes(writer, local, expiry_ms=2000)  # fresh for 1 s (half of it kept as margin)
    await w.checked_local_end(unreachable_check)
    await lost(w, writer, batch(0, age_ms=800))
    assert await w.checked_local_end(unreachable_check) == 0  # fenced: no wait
    assert w.room_now([now_ms()])
    await asyncio.sleep(0.3)  # 1.1 s old now
    assert not w.room_now([now_ms()])
    with pytest.raises(Resync):
        await w.room()


async def test_a_write_that_lands_ends_what_a_lost_one_left_unsure() -> None:
    """A write answered as landed (acks=all) means everything of ours before it is under
    the high watermark: the lost one ageing past the clock after that resyncs nothing."""
    writer, local = StandInWriter(), StandInLocal(0)
    w = writes(writer, local, expiry_ms=2000)
    await w.checked_local_end(unreachable_check)
    await lost(w, writer, batch(0, age_ms=800))
    assert await w.checked_local_end(unreachable_check) == 0  # fenced: sent again
    await w.room()
    w.submit(batch(0, age_ms=800), b"raw")
    writer.sent[-1].set_result(ProduceResult(0, 0))
    await w.drain(0)
    await asyncio.sleep(0.3)  # the lost write's timestamp past the clock now
    await w.room()  # no resync
    assert w.room_now([now_ms()])


class Brokers:
    """The local brokers' ``producer.id.expiration.ms`` as DescribeConfigs answers it."""

    def __init__(self, values: dict[int, str] | None) -> None:
        self.values = values

    async def broker_settings(self, name: str) -> dict[int, str]:
        assert name == "producer.id.expiration.ms"
        if self.values is None:
            raise ClusterError("local: describing broker setting: not authorized")
        return self.values


async def test_the_state_clock_read_again_is_only_ever_lowered() -> None:
    """Read at start, then again while the copy runs (a dynamic setting): a broker that now
    keeps producer state for less lowers the clock; a higher value, no answer or an error
    leaves it (a broker that did not answer may hold the lower one)."""
    day = StateClock(86_400_000)
    lowered = await lowered_state_clock(Brokers({1: "86400000", 2: "5000"}), day)  # type: ignore[arg-type]
    assert lowered == StateClock(5000)
    for values in ({1: "86400000"}, {1: "172800000"}, {}, None):
        assert await lowered_state_clock(Brokers(values), day) is None  # type: ignore[arg-type]
    unknown = StateClock(0)  # unreadable at start: never pipelined, nothing to lower
    assert await lowered_state_clock(Brokers({1: "5000"}), unknown) is None  # type: ignore[arg-type]
    assert await read_state_clock(Brokers({1: "9000", 2: "7000"})) == StateClock(7000)  # type: ignore[arg-type]
    assert await read_state_clock(Brokers(None)) == StateClock(0)  # type: ignore[arg-type]


async def test_a_leader_change_unproves_the_producer_state_until_a_write_lands_again() -> None:
    """A write landed on node 1, proving it holds our producer state. Another leader may
    hold none (a replica restarted with nothing in its log keeps no producer snapshot; one
    that fell behind the leader's start drops its producers), and then accepts any
    sequence: behind a refused write, the next ones would land early. So after a leader
    change writes go one at a time until one lands on the new leader."""
    writer, local, w = await started()
    first = batch(0)
    w.submit(first, b"")
    writer.sent[0].set_result(ProduceResult(0, 0))
    await w.drain(0)
    assert w.room_now([now_ms(), now_ms()])  # proven, fresh: pipelined
    local.leader_now = 2
    assert not w.room_now([now_ms(), now_ms()]) and w.status.one_at_a_time
    second = batch(10)
    w.submit(second, b"")
    writer.sent[1].set_result(ProduceResult(0, 10))
    await w.drain(0)
    assert w.room_now([now_ms(), now_ms()])  # landed on node 2: proven there
