"""Quiet partitions parked in fetch sessions: the bookkeeping of ``QuietPolls`` on plain
values, and the fetcher against a stand-in broker that keeps KIP-227 sessions (an answer in
a session names only the partitions with something new). An idle partition must cost
nothing per poll: not re-queued, no deadline, not in the request, not in what is handed
back; what comes must still come back at once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from syncer.clusters import TP, FetchedPartition
from syncer.config import CopierConfig
from syncer.errors import TransientClusterError
from syncer.fetch_connections import QUIET_CONNECTION
from syncer.fetch_session import FetchSession, Sessionless, exchange
from syncer.fetch_wants import Want, hold_always
from syncer.fetcher import Fetcher
from syncer.protocol.fetch import FetchByIdRequest, FetchedById
from syncer.quiet_polls import QuietPolls
from tests.unit.test_fetcher import Broker

T = uuid.UUID(int=1)
IDS = {"t": T}
A, B, C = TP("t", 0), TP("t", 1), TP("t", 2)
SESSION_NOT_FOUND = 70


class _Response:
    """A Fetch v13 answer as ``fetched_by_id`` reads it."""

    def __init__(self, session_id: int, error_code: int, parts: list[FetchedById]) -> None:
        self.session_id = session_id
        self.error_code = error_code
        rows: dict[uuid.UUID, list[tuple[Any, ...]]] = {}
        for p in parts:
            row = (p.partition, 0, p.high_watermark, p.last_stable_offset, 0, [], -1, p.records)
            rows.setdefault(p.topic_id, []).append(row)
        self.responses = [(t, r, {}) for t, r in rows.items()]


@dataclass
class SessionBroker(Broker):
    """Answers fetches by topic id, keeping sessions as a Kafka broker does: per partition the
    fetch offset last sent and the end last answered; an incremental answer names only the
    partitions with records or a moved end."""

    sessions: dict[int, dict[tuple[uuid.UUID, int], list[int]]] = field(default_factory=dict)
    sent: list[int] = field(default_factory=list)  # partitions each session request carried
    named: list[int] = field(default_factory=list)  # partitions each session answer named
    fail_next: bool = False  # the next session request gets no answer
    lose_sessions: bool = False  # the next session request finds its session gone
    opened: int = 0  # sessions opened

    async def fetch_by_id(
        self,
        node: int,
        offsets: Mapping[TP, tuple[int, int]],
        topic_ids: Mapping[str, uuid.UUID],
        *,
        max_wait_ms: int,
        max_bytes: int,
        partition_max_bytes: int,
        connection: int,
        nearest: bool = False,
        session: FetchSession | None = None,
    ) -> dict[TP, FetchedPartition]:
        wanted = {(topic_ids[tp.topic], tp.partition): v for tp, v in offsets.items()}

        async def send(request: FetchByIdRequest) -> Any:
            return await self._serve(request, connection)

        answers = await exchange(session or Sessionless(), wanted, (max_wait_ms, 1, ""), send)
        return {
            TP("t", p): FetchedPartition(
                0, a.high_watermark, a.last_stable_offset, 0, (), a.records
            )
            for (_t, p), a in answers.items()
        }

    def fetch_by_id_then(self, *args: Any, **kwargs: Any) -> None:
        """No connection of a stand-in is open: every fetch is sent by ``fetch_by_id``."""

    async def _serve(self, request: FetchByIdRequest, connection: int) -> _Response:
        session_id, epoch = request.session
        cache: dict[tuple[uuid.UUID, int], list[int]] = {}
        if epoch >= 0:  # in a session
            if self.fail_next:
                self.fail_next = False
                raise TransientClusterError("no answer")
            if self.lose_sessions:
                self.lose_sessions = False
                self.sessions.clear()
            if session_id == 0:
                session_id = 100 + self.opened
                self.opened += 1
                self.sessions[session_id] = {}
            elif session_id not in self.sessions:
                return _Response(0, SESSION_NOT_FOUND, [])
            cache = self.sessions[session_id]
            self.sent.append(sum(len(p) for p in request.topics.values()))
        for topic_id, partitions in request.forgotten.items():
            for p in partitions:
                cache.pop((topic_id, p), None)
        for topic_id, rows in request.topics.items():
            for p, offset, _limit in rows:
                cache[(topic_id, p)] = [offset, cache.get((topic_id, p), [0, -1])[1]]
        offsets = {TP("t", p): entry[0] for (_t, p), entry in cache.items()}
        self.requests.append((connection, offsets, request.max_wait_ms))
        await self.wait(offsets, request.max_wait_ms)
        full = request.session[0] == 0
        parts = []
        for (topic_id, p), entry in cache.items():
            end = self.ends.get(TP("t", p), 0)
            records = b"r" * (end - entry[0]) if end > entry[0] else b""
            if full or records or end != entry[1]:
                parts.append(FetchedById(topic_id, p, 0, end, end, 0, (), records))
                entry[1] = end
        if epoch >= 0:
            self.named.append(len(parts))
        return _Response(session_id if epoch >= 0 else 0, 0, parts)


def fetcher(broker: Broker, *, timeout_ms: int = 3_000) -> Fetcher:
    """Quiet wait: a third of the chunk timeout (1 s by default)."""
    config = CopierConfig(fetch_max_wait_ms=20, chunk_timeout_ms=timeout_ms)
    f = Fetcher(broker, config, topic_ids=IDS)  # type: ignore[arg-type]
    f.start()
    return f


async def wait_until(condition: Any, within: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not within the time"
        await asyncio.sleep(0.01)


# QuietPolls on plain values ------------------------------------------------------------


def want(offset: int, since: float = 0.0, hold_s: float = 30.0) -> Want:
    future: asyncio.Future[FetchedPartition] = asyncio.get_running_loop().create_future()
    w = Want(offset, 0, 100, True, future, since, hold_always, hold_s)
    w.empty = FetchedPartition(0, offset, offset, 0, (), b"")
    return w


async def test_parked_fetches_join_their_brokers_session_and_leave_it_when_unparked() -> None:
    quiet = QuietPolls(IDS)
    a, b = want(5), want(7)
    assert quiet.park(1, {A: a, B: b}) == {A: (5, 100), B: (7, 100)}
    assert A in quiet and quiet.held(A) is a and list(quiet.due()) == [1]
    quiet.sessions[1].update({(T, 0): (5, 100), (T, 1): (7, 100)})  # as the poll does
    quiet.unpark(A, want(5))  # another fetch of A: not the parked one, nothing happens
    assert quiet.held(A) is a
    quiet.unpark(A, a)
    assert A not in quiet and quiet.held(A) is None
    assert quiet.sessions[1].wanted == {(T, 1): (7, 100)}  # the next request forgets A
    quiet.out.add(1)
    assert list(quiet.due()) == []  # its poll is out


async def test_a_parked_fetch_whose_hold_ran_out_leaves() -> None:
    quiet = QuietPolls(IDS)
    a, b = want(5, since=0.0, hold_s=10.0), want(7, since=0.0, hold_s=20.0)
    quiet.park(1, {A: a, B: b})
    assert quiet.overdue(9.9) == []
    assert quiet.overdue(10.0) == [a] and A not in quiet and B in quiet
    quiet.unpark(B, b)
    assert quiet.overdue(30.0) == []  # left before: nothing to hand back


async def test_a_failed_poll_unparks_all_of_its_broker_and_closes_its_session() -> None:
    quiet = QuietPolls(IDS)
    a, b, c = want(5), want(7), want(9)
    quiet.park(1, {A: a, B: b})
    quiet.park(2, {C: c})
    session = quiet.sessions[1]
    session.update({(T, 0): (5, 100)})
    session.session_id = 42
    failed = quiet.fail(1)
    assert len(failed) == 2 and failed[0] is a and failed[1] is b
    assert A not in quiet and B not in quiet and C in quiet
    assert session.session_id == 0 and session.wanted == {}  # the next opens a new one
    assert quiet.everything() == [c]


# the fetcher's quiet polls against a broker that keeps sessions --------------------------


async def test_idle_partitions_cost_nothing_per_quiet_poll() -> None:
    """Once parked, a quiet poll carries none of them and its answer names none of them;
    none is queued again and no deadline is set for any."""
    broker = SessionBroker()
    f = fetcher(broker)
    tps = [TP("t", p) for p in range(50)]
    try:
        polls = [asyncio.ensure_future(f.fetch(tp, 0, poll=True, hold_s=60)) for tp in tps]
        await wait_until(lambda: len(f.quiet.parked[1]) == 50 and len(broker.sent) >= 2)
        deadlines = len(f._deadlines)
        polled = len(broker.sent)
        await wait_until(lambda: len(broker.sent) >= polled + 2, within=4)  # 1 s each
        assert broker.sent[polled:] == [0] * (len(broker.sent) - polled)  # nothing sent
        assert broker.named[polled:] == [0] * (len(broker.named) - polled)  # nothing named
        assert len(f._deadlines) == deadlines and not f._wants  # nothing queued again
        assert not any(p.done() for p in polls)
        broker.append(tps[7])
        got = await asyncio.wait_for(polls[7], 0.5)  # at once, not after the quiet wait
        assert got.records == b"r" and 7 not in {tp.partition for tp in f.quiet.parked[1]}
        assert not any(p.done() for n, p in enumerate(polls) if n != 7)
        for poll in polls:
            poll.cancel()
    finally:
        await f.stop()


async def test_a_partition_that_turns_quiet_while_the_poll_is_out_joins_the_next() -> None:
    """One quiet poll per broker at a time: a partition that turns quiet while it is out
    waits for it and joins the session in the next one, not in polls of its own."""
    broker = SessionBroker()
    f = fetcher(broker)
    try:
        first = asyncio.ensure_future(f.fetch(A, 0, poll=True))
        await wait_until(lambda: QUIET_CONNECTION in {c for c, _w, _m in broker.requests})
        late = asyncio.ensure_future(f.fetch(B, 0, poll=True))
        await asyncio.sleep(0.3)
        quiet = [set(w) for c, w, _m in broker.requests if c == QUIET_CONNECTION]
        assert quiet == [{A}]
        assert sum(1 for _c, w, _m in broker.requests if B in w) == 1  # looked once, short
        await wait_until(lambda: {A, B} in [set(w) for c, w, _m in broker.requests])
        broker.append(B)
        assert (await asyncio.wait_for(late, 0.5)).records == b"r"
        assert not first.done()
        first.cancel()
    finally:
        await f.stop()


async def test_a_parked_fetch_given_up_is_forgotten_by_the_session() -> None:
    broker = SessionBroker()
    f = fetcher(broker)
    try:
        polls = {tp: asyncio.ensure_future(f.fetch(tp, 0, poll=True)) for tp in (A, B)}
        await wait_until(lambda: len(f.quiet.parked[1]) == 2)
        polls[A].cancel()
        await wait_until(lambda: A not in f.quiet)
        await wait_until(lambda: [set(s) for s in broker.sessions.values()] == [{(T, 1)}])
        f.release(B)  # its copier stops: the held empty answer at once
        assert (await asyncio.wait_for(polls[B], 0.5)).records == b""
        await wait_until(lambda: not f.quiet.parked[1])
    finally:
        await f.stop()


async def test_a_hold_that_runs_out_hands_the_last_empty_answer_back() -> None:
    broker = SessionBroker()
    f = fetcher(broker, timeout_ms=1_500)  # quiet wait 0.5 s
    try:
        got = await asyncio.wait_for(f.fetch(A, 0, poll=True, hold_s=1.2), 3)
        assert got.records == b"" and got.high_watermark == 0
        assert A not in f.quiet
    finally:
        await f.stop()


async def test_a_failed_quiet_poll_fails_its_fetches_and_the_next_opens_a_new_session() -> None:
    broker = SessionBroker()
    f = fetcher(broker)
    try:
        polls = {tp: asyncio.ensure_future(f.fetch(tp, 0, poll=True)) for tp in (A, B)}
        await wait_until(lambda: len(f.quiet.parked[1]) == 2 and broker.sessions)
        broker.fail_next = True
        for poll in polls.values():  # the copiers ask again
            await wait_until(poll.done)
            assert isinstance(poll.exception(), TransientClusterError)
        assert not f.quiet.parked[1] and f.quiet.sessions[1].session_id == 0
        again = asyncio.ensure_future(f.fetch(A, 0, poll=True))
        await wait_until(lambda: broker.opened == 2)  # a full request opened a new one
        broker.append(A)
        assert (await asyncio.wait_for(again, 1.5)).records == b"r"
    finally:
        await f.stop()


async def test_a_session_the_broker_lost_is_opened_again_without_failing_anything() -> None:
    broker = SessionBroker()
    f = fetcher(broker)
    try:
        polls = {tp: asyncio.ensure_future(f.fetch(tp, 0, poll=True)) for tp in (A, B)}
        await wait_until(lambda: len(f.quiet.parked[1]) == 2 and broker.sessions)
        broker.lose_sessions = True
        await wait_until(lambda: broker.opened == 2)
        assert not any(p.done() for p in polls.values())
        assert len(next(iter(broker.sessions.values()))) == 2  # both in the new one
        broker.append(B)
        assert (await asyncio.wait_for(polls[B], 1.5)).records == b"r"
        polls[A].cancel()
    finally:
        await f.stop()


async def test_parked_fetches_whose_leader_moved_leave_for_the_new_one() -> None:
    quiet = QuietPolls(IDS)
    a, b, c = want(5), want(7), want(9)
    quiet.park(1, {A: a, B: b, C: c})
    leaders = {A: 1, B: 2}  # B moved to node 2, C has no leader known

    def route(tp: TP) -> int:
        if tp not in leaders:
            raise TransientClusterError(f"no leader for {tp}")
        return leaders[tp]

    moved = quiet.rerouted(route)
    assert [(tp, w is {B: b, C: c}[tp]) for tp, w in moved] == [(B, True), (C, True)]
    assert A in quiet and B not in quiet and C not in quiet


@dataclass
class MovingBroker(SessionBroker):
    led: dict[TP, int] = field(default_factory=dict)  # where each partition is led now

    def leader(self, tp: TP) -> int:
        return self.led.get(tp, 1)


async def test_a_parked_partition_follows_its_leader_when_the_leaders_are_refreshed() -> None:
    broker = MovingBroker()
    f = fetcher(broker)
    try:
        poll = asyncio.ensure_future(f.fetch(A, 0, poll=True, hold_s=60))
        await wait_until(lambda: A in f.quiet.parked[1])
        broker.led[A] = 2
        broker.leaders.moved({"t"}, broker.leaders.generation)  # its refresh ends at once
        await wait_until(lambda: A in f.quiet.parked[2])  # parked with its new leader
        assert not poll.done()
        broker.append(A)
        assert (await asyncio.wait_for(poll, 1.5)).records == b"r"
    finally:
        await f.stop()
