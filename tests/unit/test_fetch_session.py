"""The incremental fetch session's bookkeeping (KIP-227) on plain values: what each request
carries, and every partition's answer rebuilt from an answer that leaves out the unchanged."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from syncer.errors import TransientClusterError
from syncer.fetch_session import FetchSession, Sessionless, exchange
from syncer.protocol.fetch import FetchByIdRequest, FetchedById

T = uuid.UUID(int=7)
A, B, C = (T, 0), (T, 1), (T, 2)


def answer(key: tuple[uuid.UUID, int], hw: int, records: bytes = b"", code: int = 0) -> FetchedById:
    return FetchedById(key[0], key[1], code, hw, hw, 0, (), records)


def test_the_first_request_is_full_and_opens_a_session() -> None:
    session = FetchSession()
    wanted = {A: (5, 100), B: (7, 100)}
    plan = session.plan(wanted)
    assert plan.full and plan.epoch == 0 and plan.send == wanted and plan.forget == []
    got = session.answered(plan, wanted, 42, 0, [answer(A, 5), answer(B, 7)])
    assert got is not None and set(got) == {A, B}
    assert (session.session_id, session.epoch) == (42, 1)


def test_later_requests_carry_only_what_changed_and_what_left() -> None:
    session = FetchSession()
    first = {A: (5, 100), B: (7, 100)}
    session.answered(session.plan(first), first, 42, 0, [answer(A, 5), answer(B, 7)])
    nothing = session.plan(first)
    assert (nothing.session_id, nothing.epoch, nothing.send, nothing.forget) == (42, 1, {}, [])
    moved = {A: (6, 100), C: (0, 100)}  # A moved on, C joins, B left
    plan = session.plan(moved)
    assert plan.send == {A: (6, 100), C: (0, 100)} and plan.forget == [B]
    assert plan.topics() == {T: [(0, 6, 100), (2, 0, 100)]} and plan.forgotten() == {T: [1]}


def test_partitions_left_out_of_an_answer_are_answered_with_what_was_last_heard() -> None:
    session = FetchSession()
    wanted = {A: (5, 100), B: (7, 100)}
    session.answered(session.plan(wanted), wanted, 42, 0, [answer(A, 5), answer(B, 7)])
    plan = session.plan(wanted)
    got = session.answered(plan, wanted, 42, 0, [answer(B, 9, b"new")])  # A unchanged
    assert got is not None
    assert got[A] == FetchedById(T, 0, 0, 5, 5, 0, (), b"")  # empty, ends as last heard
    assert got[B].records == b"new" and got[B].high_watermark == 9
    assert session.epoch == 2


def test_a_session_the_broker_lost_starts_over_with_a_full_request() -> None:
    session = FetchSession()
    wanted = {A: (5, 100)}
    session.answered(session.plan(wanted), wanted, 42, 0, [answer(A, 5)])
    assert session.answered(session.plan(wanted), wanted, 0, 70, []) is None  # id not found
    assert session.plan(wanted).full


def test_a_partition_left_out_that_was_never_heard_of_starts_over() -> None:
    """The broker always answers a partition new to the session (its cached end is -1):
    one left out means the two views differ."""
    session = FetchSession()
    session.answered(session.plan({A: (5, 100)}), {A: (5, 100)}, 42, 0, [answer(A, 5)])
    wanted = {A: (5, 100), B: (0, 100)}
    assert session.answered(session.plan(wanted), wanted, 42, 0, []) is None
    assert session.plan(wanted).full


def test_an_error_is_answered_and_not_remembered_as_an_end() -> None:
    session = FetchSession()
    wanted = {A: (5, 100)}
    session.answered(session.plan(wanted), wanted, 42, 0, [answer(A, 5)])
    got = session.answered(session.plan(wanted), wanted, 42, 0, [answer(A, -1, code=6)])
    assert got is not None and got[A].error_code == 6
    assert session.answered(session.plan(wanted), wanted, 42, 0, []) is None  # not made up


def test_a_broker_with_no_room_for_a_session_is_asked_in_full_each_time() -> None:
    session = FetchSession()
    wanted = {A: (5, 100)}
    got = session.answered(session.plan(wanted), wanted, 0, 0, [answer(A, 5)])
    assert got is not None and got[A].high_watermark == 5
    assert session.plan(wanted).full


def test_sessionless_asks_in_full_with_the_final_epoch() -> None:
    plan = Sessionless().plan({A: (5, 100)})
    assert (plan.session_id, plan.epoch, plan.send) == (0, -1, {A: (5, 100)})


class _Response:
    def __init__(self, session_id: int, error_code: int, parts: list[FetchedById]) -> None:
        self.session_id = session_id
        self.error_code = error_code
        topics: dict[uuid.UUID, list[tuple[Any, ...]]] = {}
        for p in parts:
            row = (p.partition, p.error_code, p.high_watermark, p.last_stable_offset, 0, [], -1)
            topics.setdefault(p.topic_id, []).append((*row, p.records, {}))
        self.responses = [(t, rows, {}) for t, rows in topics.items()]


async def test_exchange_opens_the_session_again_when_the_broker_lost_it() -> None:
    session = FetchSession()
    wanted = {A: (5, 100)}
    session.answered(session.plan(wanted), wanted, 42, 0, [answer(A, 5)])
    sent: list[FetchByIdRequest] = []
    replies = [_Response(0, 70, []), _Response(43, 0, [answer(A, 5)])]

    async def send(request: FetchByIdRequest) -> Any:
        sent.append(request)
        return replies.pop(0)

    got = await exchange(session, wanted, (500, 1000, ""), send)
    assert got[A].high_watermark == 5
    assert [r.session for r in sent] == [(42, 1), (0, 0)]  # then a full request
    assert session.session_id == 43


async def test_exchange_forgets_the_session_when_a_request_gets_no_answer() -> None:
    session = FetchSession()
    wanted = {A: (5, 100)}
    session.answered(session.plan(wanted), wanted, 42, 0, [answer(A, 5)])

    async def send(request: FetchByIdRequest) -> Any:
        raise TimeoutError

    with pytest.raises(TimeoutError):
        await exchange(session, wanted, (500, 1000, ""), send)
    assert session.plan(wanted).full  # the broker's view is unknown


async def test_exchange_gives_up_when_the_broker_refuses_twice() -> None:
    async def send(request: FetchByIdRequest) -> Any:
        return _Response(0, 71, [])

    with pytest.raises(TransientClusterError):
        await exchange(FetchSession(), {A: (5, 100)}, (500, 1000, ""), send)
