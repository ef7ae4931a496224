"""Fetching from the nearest replica (KIP-392): which broker a partition's fetches go to, when
a read replica is forgotten, and what an answer from one means. Plain values: no broker."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from syncer.clusters import TP, Cluster, FetchedPartition
from syncer.config import ClusterConfig
from syncer.errors import TransientClusterError
from syncer.protocol.common import NOT_LEADER_OR_FOLLOWER
from syncer.replicas import ReadReplicas
from syncer.wire import OFFSET_OUT_OF_RANGE, FetchOutcome

A, B = TP("t", 0), TP("t", 1)
LEADER, FOLLOWER, OTHER = 1, 3, 2
ONLINE = {1, 2, 3}


def named(expiry_s: float = 60.0, fallback_s: float = 30.0) -> ReadReplicas:
    """A's leader named FOLLOWER at t=0."""
    replicas = ReadReplicas(expiry_s, fallback_s)
    replicas.named(A, FOLLOWER, LEADER, 0.0)
    return replicas


def test_a_partition_reads_from_its_leader_until_the_leader_names_a_replica() -> None:
    replicas = ReadReplicas(60.0)
    assert replicas.node(A, LEADER, 0.0, ONLINE) == LEADER
    replicas.named(A, FOLLOWER, LEADER, 0.0)
    assert replicas.node(A, LEADER, 1.0, ONLINE) == FOLLOWER
    assert replicas.node(B, LEADER, 1.0, ONLINE) == LEADER  # per partition


def test_the_named_replica_expires_after_metadata_max_age_and_renaming_it_keeps_its_expiry() -> (
    None
):
    replicas = named(expiry_s=60.0)
    replicas.named(A, FOLLOWER, LEADER, 50.0)  # named again: the first expiry stands (Java)
    assert replicas.node(A, LEADER, 59.9, ONLINE) == FOLLOWER
    assert replicas.node(A, LEADER, 60.0, ONLINE) == LEADER  # the leader chooses afresh
    replicas.named(A, OTHER, LEADER, 61.0)  # another one: a new expiry
    assert replicas.node(A, LEADER, 120.0, ONLINE) == OTHER


def test_a_replica_named_anew_replaces_the_old_one_at_once() -> None:
    replicas = named()
    replicas.named(A, OTHER, LEADER, 5.0)
    assert replicas.node(A, LEADER, 6.0, ONLINE) == OTHER


def test_the_leader_itself_or_no_replica_is_never_remembered() -> None:
    replicas = ReadReplicas(60.0)
    replicas.named(A, LEADER, LEADER, 0.0)
    replicas.named(B, -1, LEADER, 0.0)
    assert replicas.preferred(A, 1.0) is None
    assert replicas.preferred(B, 1.0) is None


def test_a_failed_replica_sends_the_partition_to_its_leader_without_the_rack_for_a_while() -> None:
    replicas = named(fallback_s=30.0)
    assert replicas.carries_rack([A, B], 1.0)
    replicas.failed(A, 10.0)
    assert replicas.node(A, LEADER, 10.0, ONLINE) == LEADER
    # a request holding A goes without the rack: with it, the leader would name the dead
    # follower again (it stays in the ISR for up to replica.lag.time.max.ms)
    assert not replicas.carries_rack([A, B], 39.9)
    assert replicas.carries_rack([B], 39.9)
    assert replicas.carries_rack([A, B], 40.0)  # the fall back is over


def test_a_name_that_comes_while_falling_back_is_not_taken() -> None:
    """A fetch sent with the rack before the failure may answer after it."""
    replicas = named()
    replicas.failed(A, 10.0)
    replicas.named(A, FOLLOWER, LEADER, 11.0)
    assert replicas.node(A, LEADER, 12.0, ONLINE) == LEADER
    replicas.named(A, FOLLOWER, LEADER, 41.0)  # after the fall back: taken again
    assert replicas.node(A, LEADER, 42.0, ONLINE) == FOLLOWER


def test_a_replica_missing_from_the_metadata_is_forgotten_and_the_partition_falls_back() -> None:
    replicas = named()
    assert replicas.node(A, LEADER, 1.0, {LEADER, OTHER}) == LEADER  # FOLLOWER fenced
    assert replicas.preferred(A, 1.0) is None
    assert not replicas.carries_rack([A], 1.0)
    # back in the metadata: still the leader until the leader names it again
    assert replicas.node(A, LEADER, 2.0, ONLINE) == LEADER


def test_repr_shows_how_many_partitions_read_from_replicas_and_fall_back() -> None:
    replicas = named()
    replicas.named(B, FOLLOWER, LEADER, 0.0)
    replicas.failed(B, 1.0)
    assert repr(replicas) == "<ReadReplicas [preferred: 1, falling back: 1]>"


# what an answer means ---------------------------------------------------------------------


def answer(
    code: int = 0, records: bytes = b"", replica: int = -1, *, follower: bool = False
) -> FetchedPartition:
    return FetchedPartition(code, 100, 100, 0, (), records, replica, follower)


def test_a_leader_naming_a_replica_is_asked_again_there_not_an_empty_answer() -> None:
    assert answer(replica=FOLLOWER).outcome is FetchOutcome.REROUTED
    assert answer(records=b"batch", replica=FOLLOWER).outcome is FetchOutcome.OK
    assert answer().outcome is FetchOutcome.OK


def test_a_followers_error_never_says_the_log_lost_the_offset() -> None:
    """OFFSET_OUT_OF_RANGE from a lagging follower must not halt the partition: the leader
    is asked instead (KIP-392). From the leader it keeps its meaning."""
    lagging = answer(OFFSET_OUT_OF_RANGE, follower=True)
    assert lagging.outcome is FetchOutcome.REROUTED
    assert lagging.outcome.retriable
    assert answer(NOT_LEADER_OR_FOLLOWER, follower=True).outcome is FetchOutcome.REROUTED
    assert answer(OFFSET_OUT_OF_RANGE).outcome is FetchOutcome.OUT_OF_RANGE
    assert answer(NOT_LEADER_OR_FOLLOWER).outcome is FetchOutcome.LEADER_MOVED
    assert answer(records=b"batch", follower=True).outcome is FetchOutcome.OK


# the cluster layer with a stand-in broker side ----------------------------------------------


class RackCluster(Cluster):
    """A remote whose partition A is led by LEADER with a replica on FOLLOWER, in syncer's
    rack: the leader names FOLLOWER to a fetch that carries the rack (and answers records to
    one that does not); FOLLOWER answers ``follower_code`` with ``follower_records``, or its
    connection fails if ``follower_down``. The real ``Cluster`` judges the answers."""

    def __init__(self, rack: str | None = "r2") -> None:
        config = ClusterConfig("127.0.0.1:9", name="east", client_rack=rack)
        super().__init__(config, role="remote")
        self.follower_code = 0
        self.follower_down = False
        self.asked: list[tuple[int, str]] = []  # (node, rack) of each fetch
        cluster = self._client.cluster
        cluster.leader_for_partition = lambda tp: LEADER  # type: ignore[method-assign]
        cluster.brokers = lambda: [SimpleNamespace(nodeId=n) for n in ONLINE]  # type: ignore[method-assign]

    async def send(self, node: int, request: Any, *, connection: int = 0) -> Any:
        rack = request._rack_id
        self.asked.append((node, rack))
        if node == FOLLOWER and self.follower_down:
            raise TransientClusterError("east: connection refused")
        if node == LEADER:
            replica = FOLLOWER if rack == "r2" else -1
            records = b"" if replica >= 0 else b"from the leader"
            code = 0
        else:
            replica, code = -1, self.follower_code
            records = b"" if code else b"from the follower"
        partition = (A.partition, code, 100, 100, 0, [], replica, records)
        return SimpleNamespace(topics=[(A.topic, [partition])])

    async def fetch_a(self, *, nearest: bool = True) -> FetchedPartition:
        node = self.fetch_node(A) if nearest else self.leader(A)
        sizes = {"max_wait_ms": 0, "max_bytes": 1 << 20, "partition_max_bytes": 1 << 20}
        return (await self.fetch(node, {A: 0}, nearest=nearest, **sizes))[A]


async def test_with_a_rack_the_fetch_goes_where_the_leader_points_and_bytes_count_per_node() -> (
    None
):
    cluster = RackCluster()
    named_by_leader = await cluster.fetch_a()
    assert named_by_leader.outcome is FetchOutcome.REROUTED  # no records: ask the follower
    served = await cluster.fetch_a()
    assert served.outcome is FetchOutcome.OK and served.records == b"from the follower"
    assert served.from_follower
    assert cluster.asked == [(LEADER, "r2"), (FOLLOWER, "r2")]
    assert cluster.fetched_bytes == {LEADER: 0, FOLLOWER: len(b"from the follower")}


async def test_without_a_rack_or_outside_the_fetcher_the_leader_answers() -> None:
    """``syncer verify`` and the landed check ask the leader, which must not name a replica."""
    plain = RackCluster(rack=None)
    assert (await plain.fetch_a()).records == b"from the leader"
    near = RackCluster()
    assert (await near.fetch_a(nearest=False)).records == b"from the leader"
    assert plain.asked == near.asked == [(LEADER, "")]


async def test_a_lagging_followers_out_of_range_sends_the_partition_back_to_its_leader() -> None:
    cluster = RackCluster()
    await cluster.fetch_a()  # the leader names the follower
    cluster.follower_code = OFFSET_OUT_OF_RANGE
    lagging = await cluster.fetch_a()
    assert lagging.outcome is FetchOutcome.REROUTED  # never OUT_OF_RANGE: no halt
    again = await cluster.fetch_a()
    assert again.records == b"from the leader"
    # to the leader without the rack: with it, the leader would name the follower again
    assert cluster.asked[-1] == (LEADER, "")


async def test_a_follower_that_cannot_be_reached_sends_the_partition_back_to_its_leader() -> None:
    cluster = RackCluster()
    await cluster.fetch_a()
    cluster.follower_down = True
    with pytest.raises(TransientClusterError):
        await cluster.fetch_a()
    assert (await cluster.fetch_a()).records == b"from the leader"
    assert cluster.asked[-1] == (LEADER, "")
