"""A write made inside the group's lease goes out only if the lease still holds when its
connection is open: opening one can take as long as a request's timeout, and a member whose
lease ended may no longer own the partition. Real broker; the local log read back."""

from __future__ import annotations

import asyncio

import pytest

from syncer.batches import rewrite_for_local, split_batches
from syncer.clusters import TP, Cluster, ProduceResult
from syncer.config import ClusterConfig
from syncer.errors import NotSent
from syncer.writer import Writer
from tests.kafka_helpers import create_topic, read_partition
from tests.unit.test_chunk_wakeup import records


def stamped(base: int, count: int) -> bytes | bytearray:
    """``count`` records at offset ``base``, stamped as syncer stamps them (sequence =
    offset), so that the broker takes the second right after the first."""
    (batch,) = split_batches(records(base, count))
    return rewrite_for_local(batch, 1, 0)


async def write_while_their_connection_opens(
    local: str, topic: str, *, lease_ends: bool
) -> list[asyncio.Future[ProduceResult]]:
    """Two batches of one partition submitted while their connection is not open yet (the
    writer hands each to a task that opens it, in order), the lease ending right after if
    ``lease_ends``: their outcomes."""
    lease = [True]
    await create_topic(local, topic)
    async with Cluster(ClusterConfig(local, name="local"), role="local") as cluster:
        tp = TP(topic, 0)
        await cluster.leader_for(tp)
        async with Writer(cluster, max_in_flight=5, may_write=lambda: lease[0]) as writer:
            futures = [writer.submit(tp, stamped(0, 3)), writer.submit(tp, stamped(3, 2))]
            assert sum(writer._opening.values()) == 2, "both should wait for the connection"
            lease[0] = not lease_ends
            await asyncio.wait(futures)
            return futures


async def test_writes_whose_lease_ends_while_their_connection_opens_are_not_sent(
    local: str, topic: str
) -> None:
    futures = await write_while_their_connection_opens(local, topic, lease_ends=True)
    for future in futures:
        with pytest.raises(NotSent, match="no longer allowed"):
            future.result()
    await asyncio.sleep(1)  # had one been sent, it would be there by now
    assert await read_partition(local, topic) == []


async def test_writes_whose_lease_holds_go_through_the_opening_connection_in_order(
    local: str, topic: str
) -> None:
    """The same path with the lease kept: both land, in the order made (the test above is
    not vacuous)."""
    futures = await write_while_their_connection_opens(local, topic, lease_ends=False)
    results = [future.result() for future in futures]
    assert [(r.error_code, r.base_offset) for r in results] == [(0, 0), (0, 3)]
    assert len(await read_partition(local, topic)) == 5
