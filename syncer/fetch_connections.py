"""The connections a fetcher keeps to each broker of its remote, and which of them are busy:
the data connection (``PIPELINE`` requests in flight), the long polls' (one poll in flight
on each) and the quiet partitions' one poll in its fetch session. A broker answers one
connection's requests in order, so neither kind waits behind the other. Pure bookkeeping:
the fetcher asks before it sends a request and tells when one is done."""

from __future__ import annotations

from collections import defaultdict

from syncer.fetch_wants import RequestKind

# fetch requests in flight on a broker's data connection: the second is queued at the broker
# while the first is answered, so a long link does not sit idle for a round trip between them
PIPELINE = 2
DATA_CONNECTION = 1
# one long poll in flight on each; with three, 5 MB/s over 8 partitions showed p99 20 ms
# (partitions catching up waited for a free one), with eight 9 ms
POLL_CONNECTIONS = (0, 2, 3, 4, 5, 6, 7, 8)
QUIET_CONNECTION = 9  # the quiet partitions' one poll, in a fetch session (``fetch_session``)


class FetchConnections:
    """Per broker: data requests in flight, poll connections busy, and (shared with the
    quiet polls, which read it) the brokers whose quiet poll is out."""

    def __init__(self, quiet_out: set[int]) -> None:
        self.data_busy: dict[int, int] = defaultdict(int)  # node → data requests in flight
        self.polling: dict[int, set[int]] = defaultdict(set)  # node → poll connections busy
        self.quiet_out = quiet_out

    def in_flight(self) -> int:
        return sum(self.data_busy.values()) + sum(map(len, self.polling.values()))

    def polls_full(self, node: int) -> bool:
        return len(self.polling[node]) >= len(POLL_CONNECTIONS)

    def free_polls(self, node: int) -> int:
        return len(POLL_CONNECTIONS) - len(self.polling[node])

    def data_room(self, node: int) -> bool:
        return self.data_busy[node] < PIPELINE

    def has_room(self, node: int, kind: RequestKind, joining: bool) -> bool:
        """May a fetch of ``kind`` go to ``node`` now (``joining``: a request of that kind
        to it is being made in this pass)?"""
        if kind is RequestKind.DATA:
            return self.data_room(node)
        if kind is RequestKind.QUIET:
            return node not in self.quiet_out  # one at a time: the session's
        return joining or not self.polls_full(node)

    def take(self, node: int, kind: RequestKind) -> int:
        """The connection a request of ``kind`` to ``node`` goes on, busy from now on."""
        if kind is RequestKind.DATA:
            self.data_busy[node] += 1
            return DATA_CONNECTION
        if kind is RequestKind.QUIET:
            self.quiet_out.add(node)
            return QUIET_CONNECTION
        connection = min(set(POLL_CONNECTIONS) - self.polling[node])
        self.polling[node].add(connection)
        return connection

    def free(self, node: int, connection: int) -> None:
        """A request on ``connection`` of ``node`` is done: the next may go out."""
        if connection == QUIET_CONNECTION:
            self.quiet_out.discard(node)
        elif connection == DATA_CONNECTION:
            self.data_busy[node] -= 1
        else:
            self.polling[node].discard(connection)
