"""An incremental fetch session (KIP-227) for the long polls of quiet partitions: the broker
keeps the session's partitions and their offsets, a request names only the partitions whose
offset or size changed and those it leaves, and an answer carries only the partitions with
something new (records, a moved end or start, an error). At 10,000 idle partitions a full
fetch every few seconds was most of an idle process (encoding 10,000 partitions, decoding
10,000 empty answers); in a session both are nearly empty.

Pure bookkeeping: the fetcher sends what ``plan`` says and hands the answer to ``answered``,
which gives every partition asked its answer, the ones the broker left out (nothing changed)
filled in from what the session last heard of them. Any doubt about the broker's view (an
error about the session, a request without an answer) ``reset``s it: the next request is a
full one that opens a new session.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from syncer.errors import TransientClusterError
from syncer.protocol.fetch import FetchByIdRequest, FetchedById, fetched_by_id

Key = tuple[uuid.UUID, int]  # topic id, partition
# FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR
SESSION_ERRORS = frozenset({70, 71, 106})
FINAL_EPOCH = -1  # a sessionless fetch
MAX_EPOCH = 2**31 - 1
READ_COMMITTED = 1


@dataclass(frozen=True)
class SessionRequest:
    """What one fetch request of the session carries."""

    session_id: int  # 0 with epoch 0: open a new session with every partition in ``send``
    epoch: int
    send: dict[Key, tuple[int, int]]  # partition → (offset, max bytes): new or changed
    forget: list[Key]  # in the session, not wanted now

    @property
    def full(self) -> bool:
        return self.session_id == 0

    def topics(self) -> dict[uuid.UUID, list[tuple[int, int, int]]]:
        """``send`` by topic: (partition, offset, max bytes)."""
        out: dict[uuid.UUID, list[tuple[int, int, int]]] = {}
        for (topic_id, partition), (offset, limit) in self.send.items():
            out.setdefault(topic_id, []).append((partition, offset, limit))
        return out

    def forgotten(self) -> dict[uuid.UUID, list[int]]:
        out: dict[uuid.UUID, list[int]] = {}
        for topic_id, partition in self.forget:
            out.setdefault(topic_id, []).append(partition)
        return out


class FetchSession:
    """One broker's session for one connection: one request at a time."""

    def __init__(self) -> None:
        self.reset()

    def __repr__(self) -> str:
        return f"<FetchSession {self.session_id} epoch {self.epoch} [{len(self.sent)} partitions]>"

    def reset(self) -> None:
        self.session_id = 0
        self.epoch = 0
        self.sent: dict[Key, tuple[int, int]] = {}  # the broker's view of the session
        # each partition's answer when nothing changed: no records, the ends last heard (one
        # object per partition, made when they change: 10,000 of them every poll were most
        # of what a session's poll cost)
        self.unchanged: dict[Key, FetchedById] = {}

    def plan(self, wanted: dict[Key, tuple[int, int]]) -> SessionRequest:
        """The request for ``wanted`` (partition → (offset, max bytes))."""
        if self.session_id == 0:
            return SessionRequest(0, 0, dict(wanted), [])
        send = {k: v for k, v in wanted.items() if self.sent.get(k) != v}
        forget = [k for k in self.sent if k not in wanted]
        return SessionRequest(self.session_id, self.epoch, send, forget)

    def answered(
        self,
        request: SessionRequest,
        wanted: dict[Key, tuple[int, int]],
        session_id: int,
        error_code: int,
        answers: list[FetchedById],
    ) -> dict[Key, FetchedById] | None:
        """Every partition of ``wanted``'s answer; None if the session must start over (ask
        again with a full request). A full request the broker opened no session for (its
        cache is full: session id 0) is answered in full, and the next one is full again."""
        if error_code in SESSION_ERRORS:
            self.reset()
            return None
        got = {(a.topic_id, a.partition): a for a in answers}
        if request.full:
            self.session_id, self.epoch = session_id, 1
            if not session_id:
                self.reset()
                return got
        else:
            self.epoch = self.epoch + 1 if self.epoch < MAX_EPOCH else 1
        self.sent = dict(wanted)
        for key, answer in got.items():
            if answer.error_code:  # the broker answers it again once the error is gone
                self.unchanged.pop(key, None)
            else:
                ends = (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset)
                self.unchanged[key] = FetchedById(key[0], key[1], 0, *ends, (), b"")
        if len(self.unchanged) > len(wanted):
            self.unchanged = {k: a for k, a in self.unchanged.items() if k in wanted}
        out = {}
        for key in wanted:
            found = got.get(key) or self.unchanged.get(key)
            if found is None:  # left out, and never heard of: the views differ
                self.reset()
                return None
            out[key] = found
        return out


class Sessionless(FetchSession):
    """A full fetch each time, its answer as the broker gave it (a partition left out is
    missing)."""

    def plan(self, wanted: dict[Key, tuple[int, int]]) -> SessionRequest:
        return SessionRequest(0, FINAL_EPOCH, dict(wanted), [])

    def answered(
        self,
        request: SessionRequest,
        wanted: dict[Key, tuple[int, int]],
        session_id: int,
        error_code: int,
        answers: list[FetchedById],
    ) -> dict[Key, FetchedById] | None:
        return {(a.topic_id, a.partition): a for a in answers}


async def exchange(
    session: FetchSession,
    wanted: dict[Key, tuple[int, int]],
    sizes: tuple[int, int, str],
    send: Callable[[FetchByIdRequest], Awaitable[Any]],
) -> dict[Key, FetchedById]:
    """One read_committed fetch of ``wanted`` in ``session`` (``sizes``: max wait, max
    bytes, rack), sent by ``send``: every partition's answer. A session the broker no
    longer knows is opened again with a full request at once; a request without an answer
    leaves the broker's view unknown, so the next one opens a new session."""
    for _ in range(2):
        plan = session.plan(wanted)
        request = FetchByIdRequest(
            sizes[0], sizes[1], READ_COMMITTED, plan.topics(), sizes[2],
            (plan.session_id, plan.epoch), plan.forgotten(),
        )  # fmt: skip
        try:
            response = await send(request)
        except BaseException:
            session.reset()
            raise
        answers = fetched_by_id(response)
        got = session.answered(plan, wanted, response.session_id, response.error_code, answers)
        if got is not None:
            return got
    raise TransientClusterError("the broker refused to open a fetch session")
