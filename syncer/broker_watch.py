"""A fetcher's view of the brokers of its remote while one fails: the back-off decided by
``brokers.BrokerBackoff``, applied to requests. The fetcher asks ``holds`` before it sends to
a broker, and tells ``sent``, ``answered``, ``failed`` and ``done`` of each request.

A failure of one broker, while others still answer, fails the fetches of that request with
``BrokerFailed`` (their partitions go again once the broker's back-off ends, or to a new
leader) and refreshes their leaders. A restarting broker accepts connections seconds before
it answers them (its socket is bound early in its start-up): a fetch sent to it then waits,
up to the chunk timeout, although the controller has moved its partitions to other leaders
meanwhile. So while a broker is failing, the leaders of the fetches out to it are refreshed
every ``BROKER_BACKOFF_MAX_S``, and a fetch whose partition is now routed elsewhere fails at
once and goes to its new broker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from syncer.brokers import BROKER_BACKOFF_MAX_S, BrokerBackoff, BrokerFailed
from syncer.clusters import TP, Cluster
from syncer.errors import SyncerError, TransientClusterError

log = logging.getLogger(__name__)


class Pending(Protocol):
    """A fetch waiting for its answer (``fetch_wants.Want``)."""

    @property
    def future(self) -> asyncio.Future[Any]: ...


Request = Mapping[TP, Pending]


class BrokerWatch:
    """The brokers of one fetcher's remote: which back off, and the requests out to each."""

    def __init__(self, cluster: Cluster, wakeup: Callable[[], None]) -> None:
        self.cluster = cluster
        self.backoff = BrokerBackoff()
        self._wakeup = wakeup  # dispatch again: a back-off ended, or a fetch was failed
        self._wake_at = 0.0  # when the fetcher is woken for the end of a back-off
        self._out: dict[int, list[Request]] = defaultdict(list)  # node → requests out
        self._timers: list[asyncio.TimerHandle] = []
        self._watching = False  # a refresh of the failing brokers' leaders is due
        self._refresh_task: asyncio.Task[None] | None = None
        cluster.leaders.listen(self._reroute)

    def __repr__(self) -> str:
        return f"<BrokerWatch {self.cluster.name} {self.backoff!r}>"

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        self._watching = False
        if self._refresh_task is not None:
            self._refresh_task.cancel()

    def holds(self, node: int, now: float) -> bool:
        """Must fetches routed to ``node`` wait (it failed a moment ago)? The fetcher is
        woken when the back-off ends."""
        if not self.backoff.backing_off(node, now):
            return False
        end = self.backoff.next_end(now)
        if end is not None and not now < self._wake_at <= end:  # none due by then yet
            self._wake_at = end
            self._later(end - now, self._wakeup)
        return True

    def sent(self, node: int, now: float, request: Request) -> int:
        """``request`` went to ``node``; the metadata generation it was routed by."""
        self.backoff.sent(node, now)
        self._out[node].append(request)
        return self.cluster.leaders.generation

    def answered(self, node: int) -> None:
        self.backoff.answered(node, time.monotonic())

    def done(self, node: int, request: Request) -> None:
        self._out[node].remove(request)

    def failed(
        self, node: int, request: Request, exc: Exception, sent: float, seen: int
    ) -> Exception:
        """A request sent to ``node`` at ``sent``, routed at generation ``seen``, failed: the
        error its fetches fail with. A connection error or timeout backs off that broker; if
        others of the remote still answer, it is ``BrokerFailed`` (not the remote's failure)
        and the leaders of its partitions are refreshed (a dead leader is replaced within
        the broker session timeout); else the remote has failed as a whole: ``exc``."""
        if not isinstance(exc, TransientClusterError | TimeoutError | OSError):
            return exc
        if self.backoff.failed(node, time.monotonic(), sent):
            return exc
        self.cluster.leaders.moved({tp.topic for tp in request}, seen)
        if not self._watching:
            self._watching = True
            self._later(BROKER_BACKOFF_MAX_S, self._watch)
        return BrokerFailed(node, f"{self.cluster.name} node {node}: {exc!r}")

    def _later(self, delay: float, callback: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        self._timers = [t for t in self._timers if t.when() > loop.time()]  # not yet fired
        self._timers.append(loop.call_later(delay, callback))

    def _watch(self) -> None:
        """Refresh the leaders of the fetches out to failing brokers; again after
        ``BROKER_BACKOFF_MAX_S`` while a broker is failing."""
        failing = self.backoff.failing(time.monotonic())
        self._watching = bool(failing)
        if not failing:
            return
        idle = self._refresh_task is None or self._refresh_task.done()
        if idle and any(self._out[node] for node in failing):
            self._refresh_task = asyncio.create_task(self._refresh())
        self._later(BROKER_BACKOFF_MAX_S, self._watch)

    async def _refresh(self) -> None:
        """Not through ``cluster.leaders``: that holds the fetches of the topics it refreshes
        while it runs, and one that asks the restarting broker waits the request timeout."""
        try:
            await self.cluster.refresh_metadata()
        except SyncerError as exc:  # the next check asks again
            log.info("%s: refreshing the leaders of a failing broker: %s", self.cluster.name, exc)
            return
        self._reroute()

    def _reroute(self) -> None:
        """Leaders were refreshed: a fetch out to a failing broker whose partition is routed
        elsewhere now fails with ``BrokerFailed``, so it goes again, there."""
        for node in self.backoff.failing(time.monotonic()):
            for request in self._out[node]:
                for tp, pending in request.items():
                    if pending.future.done():
                        continue
                    with contextlib.suppress(SyncerError):  # no leader known: it waits
                        if self.cluster.fetch_node(tp) != node:
                            error = f"{self.cluster.name}: {tp} moved off failing node {node}"
                            pending.future.set_exception(BrokerFailed(node, error))
        self._wakeup()
