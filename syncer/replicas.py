"""Which broker a remote partition's fetches go to when syncer has a rack (KIP-392).

Cross-zone traffic is what a mirror costs in the cloud. A fetch (v11+) carries the client's
rack; a leader whose brokers run ``replica.selector.class=...RackAwareReplicaSelector``
answers it with no records and ``preferred_read_replica``: an in-sync follower in that rack.
The fetches that follow go there, and that follower serves records up to its high watermark.

The rules are the Java consumer's (``SubscriptionState.preferredReadReplica``,
``AbstractFetch.selectReadReplica``, ``FetchCollector.handleInitializeErrors``): a named
replica is remembered until ``metadata.max.age.ms`` after it was first named (the leader then
chooses again); it is forgotten when it is not among the brokers the metadata lists, when its
fetch fails (no connection, a timeout) or when it answers any error (NOT_LEADER_OR_FOLLOWER,
OFFSET_OUT_OF_RANGE when it lags, REPLICA_NOT_AVAILABLE...): the leader is asked instead.

One rule is ours: after a failure the partition's fetches go to the leader *without* the
rack for ``fallback_s``. A leader keeps naming a killed follower until it drops it from the
ISR (``replica.lag.time.max.ms``, 30 s by default) or the controller fences it (9 s): asked
with the rack, it would answer every fetch with that follower's name and no records, and the
copy would stand still meanwhile. A request carries one rack for all its partitions, so a
request to a leader goes without it while any partition in it falls back.

Plain values only (``now`` is passed in): the cluster layer asks and tells it."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from aiokafka.structs import TopicPartition as TP

# after its read replica failed, a partition reads from its leader for this long: past the
# 9 s a broker takes to be fenced, and long enough for a restarted follower to catch up
FALLBACK_S = 30.0
MIN_EXPIRY_S = 1.0


@dataclass(frozen=True, slots=True)
class Preferred:
    """The replica a partition's leader named, until when it is used."""

    node: int
    until: float


class ReadReplicas:
    """Per partition of one remote: the read replica its leader named, or a fall back to
    the leader after that replica failed."""

    def __init__(self, expiry_s: float, fallback_s: float = FALLBACK_S) -> None:
        # metadata.max.age.ms, as the Java consumer; never so short that a replica expires
        # before it is asked (the leader would name it again and again)
        self.expiry_s = max(expiry_s, MIN_EXPIRY_S)
        self.fallback_s = fallback_s
        self._preferred: dict[TP, Preferred] = {}
        self._fallback: dict[TP, float] = {}  # partition → until when it asks its leader

    def __repr__(self) -> str:
        return (
            f"<ReadReplicas [preferred: {len(self._preferred)},"
            f" falling back: {len(self._fallback)}]>"
        )

    def node(self, tp: TP, leader: int, now: float, online: Collection[int]) -> int:
        """The broker to send ``tp``'s next fetch to: its read replica while remembered and
        listed in the metadata (``online``), else its leader."""
        preferred = self.preferred(tp, now)
        if preferred is None:
            return leader
        if preferred not in online:  # gone from the metadata: a dead or fenced broker
            self.failed(tp, now)
            return leader
        return preferred

    def preferred(self, tp: TP, now: float) -> int | None:
        """The read replica remembered for ``tp`` (None once it expired)."""
        found = self._preferred.get(tp)
        if found is not None and now >= found.until:
            del self._preferred[tp]
            return None
        return None if found is None else found.node

    def carries_rack(self, tps: Iterable[TP], now: float) -> bool:
        """May a request for ``tps`` carry the rack (no partition of it falls back)?"""
        return not any(self.falling_back(tp, now) for tp in tps)

    def falling_back(self, tp: TP, now: float) -> bool:
        until = self._fallback.get(tp)
        if until is not None and now >= until:
            del self._fallback[tp]
            return False
        return until is not None

    def named(self, tp: TP, node: int, leader: int, now: float) -> None:
        """``tp``'s leader named ``node`` as its read replica. A name already remembered
        keeps its expiry (the leader chooses afresh once it passes, as in Java); a name
        that comes while the partition falls back (a request sent before the failure) is
        not taken."""
        if node == leader or node < 0 or self.falling_back(tp, now):
            return
        if self.preferred(tp, now) != node:
            self._preferred[tp] = Preferred(node, now + self.expiry_s)

    def failed(self, tp: TP, now: float) -> None:
        """A fetch of ``tp`` from a broker other than its leader failed or answered an
        error: forget the replica, and ask the leader, without the rack, for a while."""
        self._preferred.pop(tp, None)
        self._fallback[tp] = now + self.fallback_s
