"""The per-partition task: read the local end, fetch from a remote that is ahead, check for
holes, write each batch at its own offset, verify, repeat. The local log is the checkpoint:
after any error the copier starts over from the local end it reads back."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from aiokafka import errors as kafka_errors

from syncer.batches import Batch, rewrite_for_local, split_batches
from syncer.clusters import TP, Cluster, FetchedPartition, ProduceResult, error_for
from syncer.config import CopierConfig
from syncer.errors import (
    ForeignWrite,
    HoleFound,
    MisalignedWrite,
    PartitionHalted,
    SourceDataLost,
    TransientClusterError,
)
from syncer.fetcher import Fetcher
from syncer.identity import WriterIdentity
from syncer.planner import RemoteEnds, choose_remote, scan
from syncer.writer import Writer

log = logging.getLogger(__name__)

OUT_OF_ORDER_SEQUENCE = kafka_errors.OutOfOrderSequenceNumber.errno
DUPLICATE_SEQUENCE = kafka_errors.DuplicateSequenceNumber.errno
OFFSET_OUT_OF_RANGE = kafka_errors.OffsetOutOfRangeError.errno
TOO_LARGE = {
    kafka_errors.MessageSizeTooLargeError.errno,
    kafka_errors.RecordListTooLargeError.errno,
}


class State(StrEnum):
    STARTING = "starting"
    COPYING = "copying"
    CAUGHT_UP = "caught-up"
    RETRYING = "retrying"
    HALTED = "halted"
    STOPPED = "stopped"


@dataclass
class PartitionStatus:
    """Live figures of one partition, as status and metrics show them."""

    tp: TP
    local_end: int = -1
    remote_ends: dict[str, RemoteEnds] = field(default_factory=dict)
    state: State = State.STARTING
    source: str | None = None
    error: str | None = None
    records_copied: int = 0
    bytes_copied: int = 0
    retries: int = 0

    @property
    def remote_end(self) -> int:
        return max((e.end for e in self.remote_ends.values()), default=-1)

    @property
    def lag(self) -> int:
        return max(0, self.remote_end - self.local_end)


def _consume(future: asyncio.Future[ProduceResult]) -> None:
    if not future.cancelled():
        future.exception()


class _Resync(Exception):
    """The local end moved under us (another writer, a retried write): read it again.
    ``refused_at`` is set when the broker refused our sequence for that offset."""

    def __init__(self, message: str, refused_at: int | None = None) -> None:
        super().__init__(message)
        self.refused_at = refused_at


@dataclass(frozen=True, slots=True)
class _Sent:
    base_offset: int
    next_offset: int
    records: int
    size: int


class PartitionCopier:
    """Copies one partition from the remotes to local, offset for offset."""

    def __init__(
        self,
        tp: TP,
        local: Cluster,
        writer: Writer,
        fetchers: Mapping[str, Fetcher],
        identity: WriterIdentity,
        config: CopierConfig,
        remote_ends: Mapping[str, RemoteEnds] | None = None,
    ) -> None:
        self.tp = tp
        self.local = local
        self.writer = writer
        self.fetchers = fetchers
        self.identity = identity
        self.config = config
        self.status = PartitionStatus(tp, remote_ends=dict(remote_ends or {}))
        self._stopping = False
        self._pending: deque[tuple[_Sent, asyncio.Future[ProduceResult]]] = deque()
        self._refused_at: int | None = None

    def __repr__(self) -> str:
        s = self.status
        return (
            f"<PartitionCopier {self.tp.topic}[{self.tp.partition}] {s.state.value}"
            f" [local end: {s.local_end}, remote end: {s.remote_end}]>"
        )

    def request_stop(self) -> None:
        """Finish the writes in flight, then return from ``run``."""
        self._stopping = True

    async def run(self, until: int | None = None) -> PartitionStatus:
        """Copy until stopped, or until the local end reaches ``until`` (catch-up)."""
        backoff = self.config.retry_backoff_ms / 1000
        while not self._stopping:
            try:
                await self._copy(until)
                break
            except PartitionHalted as exc:
                self._halt(exc)
                return self.status
            except (TransientClusterError, _Resync) as exc:
                if isinstance(exc, _Resync) and exc.refused_at is not None:
                    if exc.refused_at == self._refused_at:
                        self._halt(ForeignWrite(self._foreign_write_message(exc.refused_at)))
                        return self.status
                    self._refused_at = exc.refused_at
                self.status.retries += 1
                self.status.state = State.RETRYING
                log.info(
                    "%s[%d]: %s; resuming from the local end", self.tp.topic, self.tp.partition, exc
                )
                self._abandon_pending()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.config.retry_backoff_max_ms / 1000)
        self.status.state = State.STOPPED if self._stopping else State.CAUGHT_UP
        return self.status

    def _foreign_write_message(self, offset: int) -> str:
        return (
            f"{self.tp.topic}[{self.tp.partition}]: the broker refuses our sequence at local end"
            f" {offset} twice: the records before it were not written by this deployment"
            " (a foreign producer writes into this partition)"
        )

    def _abandon_pending(self) -> None:
        """Forget the writes still queued or in flight; the local end read next tells what
        landed. Their outcomes are consumed so that none goes unretrieved."""
        self.writer.forget(self.tp)
        for _sent, future in self._pending:
            future.add_done_callback(_consume)
        self._pending.clear()

    def _halt(self, exc: PartitionHalted) -> None:
        self._abandon_pending()
        self.status.state = State.HALTED
        self.status.error = str(exc)
        log.error("%s[%d] halted: %s", self.tp.topic, self.tp.partition, exc)

    async def _copy(self, until: int | None) -> None:
        self.status.local_end = (await self.local.latest([self.tp]))[self.tp]
        next_offset = self.status.local_end
        while not self._stopping:
            if until is not None and next_offset >= until:
                break
            remote = self._choose(next_offset)
            fetched = await self.fetchers[remote].fetch(self.tp, next_offset)
            self._observe(remote, fetched, next_offset)
            self._check_done()
            batches = split_batches(fetched.records)
            found = scan(batches, next_offset, limit=fetched.stable_end, aborted=fetched.aborted)
            for batch in found.writable:
                await self._drain(self.config.max_in_flight - 1)
                self._send(batch)
            next_offset = found.next_offset
            if found.hole is not None:
                await self._drain(0)
                raise HoleFound(
                    f"{self.tp.topic}[{self.tp.partition}]: {found.hole.describe()}"
                    f" (remote {remote}); policy is halt"
                )
            if not found.writable:
                if until is not None and fetched.stable_end <= next_offset:
                    break  # the remote has no more than this to give
                self.status.state = State.CAUGHT_UP
        await self._drain(0)

    def _choose(self, next_offset: int) -> str:
        choice = choose_remote(next_offset, self.status.remote_ends)
        if choice.lost_below is not None:
            raise SourceDataLost(
                f"{self.tp.topic}[{self.tp.partition}]: records {next_offset}.."
                f"{choice.lost_below - 1} are gone at every remote (start {choice.lost_below}"
                f" is beyond the local end {next_offset})"
            )
        remote = choice.remote or self.status.source or next(iter(self.fetchers))
        if remote != self.status.source:
            log.info("%s[%d]: reading from remote %s", self.tp.topic, self.tp.partition, remote)
        self.status.source = remote
        return remote

    def _observe(self, remote: str, fetched: FetchedPartition, offset: int) -> None:
        code = fetched.error_code
        if code == 0:
            self.status.remote_ends[remote] = RemoteEnds(
                fetched.log_start_offset, fetched.stable_end
            )
            return
        where = f"{self.tp.topic}[{self.tp.partition}]"
        if code == OFFSET_OUT_OF_RANGE:
            raise PartitionHalted(
                f"{where}: offset {offset} is out of range at remote {remote}: the remote's log"
                " no longer holds it or ends before it (topic deleted and recreated?)"
            )
        error = error_for(code, f"{where}: fetch from remote {remote}")
        if isinstance(error, TransientClusterError):
            raise error
        raise PartitionHalted(str(error))

    def _send(self, batch: Batch) -> None:
        raw = rewrite_for_local(batch, self.identity.producer_id, self.identity.producer_epoch)
        sent = _Sent(batch.base_offset, batch.next_offset, batch.record_count, len(raw))
        self._pending.append((sent, self.writer.submit(self.tp, raw)))
        self.status.state = State.COPYING

    def _check_done(self) -> None:
        while self._pending and self._pending[0][1].done():
            sent, future = self._pending.popleft()
            self._verify(sent, future.result())

    async def _drain(self, keep: int) -> None:
        while len(self._pending) > keep:
            sent, future = self._pending[0]
            result = await future
            self._pending.popleft()
            self._verify(sent, result)

    def _verify(self, sent: _Sent, result: ProduceResult) -> None:
        where = f"{self.tp.topic}[{self.tp.partition}]"
        code = result.error_code
        if code == OUT_OF_ORDER_SEQUENCE:
            raise _Resync(
                f"sequence refused at offset {sent.base_offset}: the partition moved",
                refused_at=sent.base_offset,
            )
        if code == DUPLICATE_SEQUENCE:
            raise _Resync(f"duplicate sequence at offset {sent.base_offset}")
        if code in TOO_LARGE:
            raise PartitionHalted(
                f"{where}: batch at offset {sent.base_offset} ({sent.size} bytes) is larger than"
                " the local topic's max.message.bytes allows"
            )
        if code:
            error = error_for(code, f"{where}: write at offset {sent.base_offset}")
            if isinstance(error, TransientClusterError):
                raise error
            raise PartitionHalted(str(error))
        if result.base_offset != sent.base_offset:
            raise MisalignedWrite(
                f"{where}: record from remote offset {sent.base_offset} landed at local offset"
                f" {result.base_offset}; another producer writes into this partition"
            )
        self._refused_at = None
        self.status.local_end = sent.next_offset
        self.status.records_copied += sent.records
        self.status.bytes_copied += sent.size
