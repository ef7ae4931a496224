"""An incremental fetch session (KIP-227) for the long polls of quiet partitions: the broker
keeps the session's partitions and their offsets, a request names only the partitions whose
offset or size changed and those it leaves, and an answer carries only the partitions with
something new (records, a moved end or start, an error). At 10,000 idle partitions a full
fetch every few seconds was most of an idle process (encoding 10,000 partitions, decoding
10,000 empty answers); in a session both are nearly empty.

The session holds what is wanted of it between requests: ``update`` adds or moves
partitions, ``drop`` takes them out, and a partition nobody touches costs nothing per poll
(no entry in the request, none in the answer, none in what is handed back). Pure
bookkeeping: the fetcher sends what ``plan`` says and hands the answer to ``answered``, which
gives back the partitions the broker named, and each partition this request sent that the
broker left out (nothing changed) filled in from what the session last heard of it: no
records, the ends last heard, so a wrong view can only delay a copy, never write one. The
partitions neither sent nor named are unchanged since their last answer. Any doubt about
the broker's view (an error about the session, a request without an answer) ``reset``s it:
the next request is a full one that opens a new session with everything wanted.
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
        self.wanted: dict[Key, tuple[int, int]] = {}  # partition → (offset, max bytes)
        self._touched: set[Key] = set()  # updated or dropped since the last plan
        self.reset()

    def __repr__(self) -> str:
        return f"<FetchSession {self.session_id} epoch {self.epoch} [{len(self.sent)} partitions]>"

    def reset(self) -> None:
        """Forget the broker's view (what is wanted stays): the next request is full."""
        self.session_id = 0
        self.epoch = 0
        self.sent: dict[Key, tuple[int, int]] = {}  # the broker's view of the session
        # each partition's answer when nothing changed: no records, the ends last heard (one
        # object per partition, made when they change)
        self.unchanged: dict[Key, FetchedById] = {}

    def clear(self) -> None:
        """Nothing is wanted any more, and the broker's view is forgotten."""
        self.wanted = {}
        self._touched = set()
        self.reset()

    def update(self, wanted: dict[Key, tuple[int, int]]) -> None:
        """Add the partitions of ``wanted`` (partition → (offset, max bytes)) to the session,
        or move them to the offset given."""
        for key, value in wanted.items():
            if self.wanted.get(key) != value:
                self.wanted[key] = value
                self._touched.add(key)

    def drop(self, key: Key) -> None:
        """``key`` is not wanted any more: the next request forgets it."""
        if self.wanted.pop(key, None) is not None:
            self._touched.add(key)

    def plan(self) -> SessionRequest:
        """The next request: everything wanted if no session is open, else what changed."""
        touched, self._touched = self._touched, set()
        if self.session_id == 0:
            return SessionRequest(0, 0, dict(self.wanted), [])
        wanted, sent = self.wanted, self.sent
        send = {k: wanted[k] for k in touched if k in wanted and sent.get(k) != wanted[k]}
        forget = [k for k in touched if k not in wanted and k in sent]
        return SessionRequest(self.session_id, self.epoch, send, forget)

    def answered(
        self, request: SessionRequest, session_id: int, error_code: int, answers: list[FetchedById]
    ) -> dict[Key, FetchedById] | None:
        """The partitions the broker named and those ``request`` sent (left out: filled in
        with the ends last heard); None if the session must start over (ask again with a full
        request). A full request the broker opened no session for (its cache is full:
        session id 0) is answered in full, and the next one is full again."""
        if error_code in SESSION_ERRORS:
            self.reset()
            return None
        got = {(a.topic_id, a.partition): a for a in answers}
        if request.full:
            self.session_id, self.epoch = session_id, 1
            self.sent, self.unchanged = dict(request.send), {}
        else:
            self.epoch = self.epoch + 1 if self.epoch < MAX_EPOCH else 1
            self.sent.update(request.send)
            for key in request.forget:
                self.sent.pop(key, None)
                self.unchanged.pop(key, None)
        for key, answer in got.items():
            if answer.error_code:  # the broker answers it again once the error is gone
                self.unchanged.pop(key, None)
            else:
                ends = (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset)
                self.unchanged[key] = FetchedById(key[0], key[1], 0, *ends, (), b"")
        for key in request.send:
            if key in got:
                continue
            found = self.unchanged.get(key)
            if found is None:  # left out, and never heard of: the views differ
                self.reset()
                return None
            got[key] = found
        if not session_id and request.full:
            self.reset()
        return got


class Sessionless(FetchSession):
    """A full fetch of what the last ``update`` gave each time, its answer as the broker gave
    it (a partition left out is missing)."""

    def update(self, wanted: dict[Key, tuple[int, int]]) -> None:
        self.wanted = wanted

    def plan(self) -> SessionRequest:
        return SessionRequest(0, FINAL_EPOCH, self.wanted, [])

    def answered(
        self, request: SessionRequest, session_id: int, error_code: int, answers: list[FetchedById]
    ) -> dict[Key, FetchedById] | None:
        return {(a.topic_id, a.partition): a for a in answers}


async def exchange(
    session: FetchSession,
    wanted: dict[Key, tuple[int, int]],
    sizes: tuple[int, int, str],
    send: Callable[[FetchByIdRequest], Awaitable[Any]],
) -> dict[Key, FetchedById]:
    """One read_committed fetch in ``session`` after ``wanted`` joined it (``sizes``: max
    wait, max bytes, rack), sent by ``send``: the answers ``FetchSession.answered`` gives. A
    session the broker no longer knows is opened again with a full request at once; a
    request without an answer leaves the broker's view unknown, so the next one opens a new
    session."""
    session.update(wanted)
    for _ in range(2):
        plan = session.plan()
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
        got = session.answered(plan, response.session_id, response.error_code, answers)
        if got is not None:
            return got
    raise TransientClusterError("the broker refused to open a fetch session")
