"""A write made inside the group's lease goes out only if the lease still holds when its
connection is open: opening one can take as long as a request's timeout, and a member whose
lease ended may no longer own the partition. Real broker; the local log read back."""

from __future__ import annotations

import asyncio

import pytest

from syncer.clusters import TP, Cluster, ProduceResult
from syncer.config import ClusterConfig
from syncer.errors import NotSent
from syncer.writer import Writer
from tests.kafka_helpers import create_topic, read_partition
from tests.unit.test_chunk_wakeup import records


async def write_while_its_connection_opens(
    local: str, topic: str, *, lease_ends: bool
) -> ProduceResult:
    """Three records submitted while their connection is not open yet (the writer hands
    them to a task that opens it), the lease ending right after if ``lease_ends``."""
    lease = [True]
    await create_topic(local, topic)
    async with Cluster(ClusterConfig(local, name="local"), role="local") as cluster:
        tp = TP(topic, 0)
        await cluster.leader_for(tp)
        async with Writer(cluster, max_in_flight=5, may_write=lambda: lease[0]) as writer:
            future = writer.submit(tp, records(0, 3))
            assert writer._opening, "the write should wait for its connection to open"
            lease[0] = not lease_ends
            return await future


async def test_a_write_whose_lease_ends_while_its_connection_opens_is_not_sent(
    local: str, topic: str
) -> None:
    with pytest.raises(NotSent, match="no longer allowed"):
        await write_while_its_connection_opens(local, topic, lease_ends=True)
    await asyncio.sleep(1)  # had it been sent, it would be there by now
    assert await read_partition(local, topic) == []


async def test_a_write_whose_lease_holds_goes_through_the_opening_connection(
    local: str, topic: str
) -> None:
    """The same path with the lease kept: the write lands (the test above is not vacuous)."""
    result = await write_while_its_connection_opens(local, topic, lease_ends=False)
    assert (result.error_code, result.base_offset) == (0, 0)
    assert len(await read_partition(local, topic)) == 3
