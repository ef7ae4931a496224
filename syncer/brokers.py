"""Which brokers of one remote back off after fetches to them failed, and when the remote as a
whole counts as failed: pure decisions over plain values (``now`` passed in), kept by each
fetcher (lane) for the brokers it sends to.

A remote of several brokers loses one at a time (a kill -9, a rolling restart): a connection
error to one broker says nothing of the others. Backing off the whole remote for it stalled
every partition of the remote for 2 to 3 s (issue 19), also those led by the healthy brokers.
So a failure backs off only its broker: the partitions whose fetches go there wait, and ask
for a metadata refresh (the controller moves their leadership within the broker session
timeout; the refreshed metadata routes them to the new leader), while the other brokers'
partitions keep copying. As the Java client's ``reconnect.backoff.ms`` does, the broker's
back-off starts short and doubles up to ``BROKER_BACKOFF_MAX_S``: short, so a leader that
moved is found within about a second of the move.

The remote fails as a whole (its ``SourceHealth`` backs off, other remotes take its chunks)
only when every broker it routes to has failed its last request: a cut link, a remote of one
broker. A broker counts as routed to while requests went to it in the last ``ROUTED_S``; one
no partition goes to any more (its leaders moved away) does not keep a remote alive, nor
does a dead one that nothing goes to make it fail."""

from __future__ import annotations

from dataclasses import dataclass

from syncer.errors import TransientClusterError

BROKER_BACKOFF_S = 0.1
BROKER_BACKOFF_MAX_S = 1.0
# a broker sent nothing for this long is not routed to (every broker that leads a partition
# of ours gets a poll at least every few seconds: ``fetcher.QUIET_WAIT_MS``)
ROUTED_S = 10.0


class BrokerFailed(TransientClusterError):
    """A fetch failed at one broker of a remote whose other brokers still answer: the
    partitions routed there back off, the remote does not."""

    def __init__(self, node: int, message: str) -> None:
        super().__init__(message)
        self.node = node


@dataclass
class _Broker:
    failures_in_row: int = 0
    until: float = 0.0  # backs off until then
    last_failure: float = float("-inf")
    used: float = float("-inf")  # when a request last went to it or came back from it


class BrokerBackoff:
    """The brokers of one remote as one fetcher sees them."""

    def __init__(self) -> None:
        self._brokers: dict[int, _Broker] = {}

    def __repr__(self) -> str:
        failing = sorted(n for n, b in self._brokers.items() if b.failures_in_row)
        return f"<BrokerBackoff [failing: {failing or '-'}]>"

    def _broker(self, node: int) -> _Broker:
        return self._brokers.setdefault(node, _Broker())

    def sent(self, node: int, now: float) -> None:
        self._broker(node).used = now

    def answered(self, node: int, now: float) -> None:
        """A request to ``node`` was answered: it is healthy again."""
        broker = self._broker(node)
        broker.used = now
        broker.failures_in_row = 0
        broker.until = 0.0

    def failed(self, node: int, now: float, sent: float) -> bool:
        """A request sent to ``node`` at ``sent`` failed (no connection, a timeout). Requests
        already out when the previous failure was seen fail with it: no more back-off for
        them. Whether the remote as a whole has failed now (``remote_failed``)."""
        broker = self._broker(node)
        broker.used = now
        if sent >= broker.last_failure:
            broker.last_failure = now
            broker.failures_in_row += 1
            doublings = min(broker.failures_in_row - 1, 16)
            broker.until = now + min(BROKER_BACKOFF_MAX_S, BROKER_BACKOFF_S * 2**doublings)
        return self.remote_failed(now)

    def backing_off(self, node: int, now: float) -> bool:
        """Do fetches routed to ``node`` wait (it failed a moment ago)?"""
        broker = self._brokers.get(node)
        return broker is not None and now < broker.until

    def next_end(self, now: float) -> float | None:
        """When the first back-off under way ends (to wake the fetches it holds), if any."""
        return min((b.until for b in self._brokers.values() if b.until > now), default=None)

    def failing(self, now: float) -> set[int]:
        """The brokers routed to whose last request failed: one may accept connections again
        (restarting) long before it answers them, so their leaders are asked for meanwhile."""
        return {
            n for n, b in self._brokers.items() if b.failures_in_row and now - b.used <= ROUTED_S
        }

    def remote_failed(self, now: float) -> bool:
        """Has every broker routed to (in the last ``ROUTED_S``) failed its last request?"""
        routed = [b for b in self._brokers.values() if now - b.used <= ROUTED_S]
        return bool(routed) and all(b.failures_in_row for b in routed)
