"""The incremental fetch session's bookkeeping (KIP-227) on plain values: what each request
carries, and what is handed back of an answer that leaves out the unchanged."""

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


def opened(wanted: dict[tuple[uuid.UUID, int], tuple[int, int]]) -> FetchSession:
    """A session opened (id 42) with ``wanted``, each answered at its offset."""
    session = FetchSession()
    session.update(wanted)
    answers = [answer(key, offset) for key, (offset, _) in wanted.items()]
    assert session.answered(session.plan(), 42, 0, answers) is not None
    return session


def test_the_first_request_is_full_and_opens_a_session() -> None:
    session = FetchSession()
    wanted = {A: (5, 100), B: (7, 100)}
    session.update(wanted)
    plan = session.plan()
    assert plan.full and plan.epoch == 0 and plan.send == wanted and plan.forget == []
    got = session.answered(plan, 42, 0, [answer(A, 5), answer(B, 7)])
    assert got is not None and set(got) == {A, B}
    assert (session.session_id, session.epoch) == (42, 1)


def test_later_requests_carry_only_what_changed_and_what_left() -> None:
    session = opened({A: (5, 100), B: (7, 100)})
    session.update({A: (5, 100), B: (7, 100)})  # asked again as they are: nothing to send
    nothing = session.plan()
    assert (nothing.session_id, nothing.epoch, nothing.send, nothing.forget) == (42, 1, {}, [])
    session.answered(nothing, 42, 0, [])
    session.update({A: (6, 100), C: (0, 100)})  # A moved on, C joins, B leaves
    session.drop(B)
    plan = session.plan()
    assert plan.send == {A: (6, 100), C: (0, 100)} and plan.forget == [B]
    assert plan.topics() == {T: [(0, 6, 100), (2, 0, 100)]} and plan.forgotten() == {T: [1]}
    got = session.answered(plan, 42, 0, [answer(C, 0)])  # A left out: ends as last heard
    assert got == {A: FetchedById(T, 0, 0, 5, 5, 0, (), b""), C: answer(C, 0)}
    assert session.sent == {A: (6, 100), C: (0, 100)}


def test_an_answer_names_only_what_changed_and_what_was_sent() -> None:
    """A partition neither sent nor named is unchanged: it is not handed back at all (it
    costs nothing per poll); the broker's view and the session's stay the same."""
    session = opened({A: (5, 100), B: (7, 100)})
    plan = session.plan()
    got = session.answered(plan, 42, 0, [answer(B, 9, b"new")])  # A unchanged
    assert got is not None and set(got) == {B}
    assert got[B].records == b"new" and got[B].high_watermark == 9
    assert session.epoch == 2 and session.sent == {A: (5, 100), B: (7, 100)}


def test_what_was_sent_and_left_out_is_answered_with_the_ends_last_heard() -> None:
    session = opened({A: (5, 100), B: (7, 100)})
    session.answered(session.plan(), 42, 0, [answer(A, 9, b"records")])
    session.update({A: (9, 100)})  # copied to 9: asked there, the broker sees no change
    got = session.answered(session.plan(), 42, 0, [])
    assert got == {A: FetchedById(T, 0, 0, 9, 9, 0, (), b"")}  # no records are ever made up


def test_a_dropped_partition_that_comes_back_is_sent_again_only_if_it_moved() -> None:
    session = opened({A: (5, 100)})
    session.drop(A)
    session.update({A: (5, 100)})  # back before any request: the broker still has it so
    assert session.plan().send == {} and session.plan().forget == []
    session.drop(A)
    forget = session.plan()
    assert forget.forget == [A]
    session.answered(forget, 42, 0, [])
    session.update({A: (5, 100)})
    assert session.plan().send == {A: (5, 100)}  # the broker forgot it: sent again


def test_a_session_the_broker_lost_starts_over_with_a_full_request() -> None:
    session = opened({A: (5, 100), B: (7, 100)})
    session.drop(B)
    assert session.answered(session.plan(), 0, 70, []) is None  # id not found
    plan = session.plan()
    assert plan.full and plan.send == {A: (5, 100)}  # everything still wanted


def test_a_partition_left_out_that_was_never_heard_of_starts_over() -> None:
    """The broker always answers a partition new to the session (its cached end is -1):
    one left out means the two views differ."""
    session = opened({A: (5, 100)})
    session.update({B: (0, 100)})
    assert session.answered(session.plan(), 42, 0, []) is None
    assert session.plan().full


def test_a_full_answer_that_leaves_one_out_starts_over() -> None:
    session = FetchSession()
    session.update({A: (5, 100), B: (0, 100)})
    assert session.answered(session.plan(), 42, 0, [answer(A, 5)]) is None
    assert session.plan().full


def test_an_error_is_answered_and_not_remembered_as_an_end() -> None:
    session = opened({A: (5, 100)})
    got = session.answered(session.plan(), 42, 0, [answer(A, -1, code=6)])
    assert got is not None and got[A].error_code == 6
    session.update({A: (6, 100)})
    assert session.answered(session.plan(), 42, 0, []) is None  # not made up


def test_a_broker_with_no_room_for_a_session_is_asked_in_full_each_time() -> None:
    session = FetchSession()
    session.update({A: (5, 100)})
    got = session.answered(session.plan(), 0, 0, [answer(A, 5)])
    assert got is not None and got[A].high_watermark == 5
    assert session.plan().full and session.plan().send == {A: (5, 100)}


def test_sessionless_asks_in_full_with_the_final_epoch() -> None:
    sessionless = Sessionless()
    sessionless.update({A: (5, 100)})
    plan = sessionless.plan()
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
    wanted = {A: (5, 100)}
    session = opened(wanted)
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
    wanted = {A: (5, 100)}
    session = opened(wanted)

    async def send(request: FetchByIdRequest) -> Any:
        raise TimeoutError

    with pytest.raises(TimeoutError):
        await exchange(session, wanted, (500, 1000, ""), send)
    assert session.plan().full  # the broker's view is unknown


async def test_exchange_gives_up_when_the_broker_refuses_twice() -> None:
    async def send(request: FetchByIdRequest) -> Any:
        return _Response(0, 71, [])

    with pytest.raises(TransientClusterError):
        await exchange(FetchSession(), {A: (5, 100)}, (500, 1000, ""), send)
