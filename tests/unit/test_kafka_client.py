"""syncer.kafka_client: a broker that takes a connection and answers nothing holds up only
its own connections (aiokafka's one lock per client held up every broker's)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiokafka.client
import pytest
from aiokafka.structs import BrokerMetadata

from syncer.kafka_client import KafkaClient

SILENT, HEALTHY = 1, 2  # node ids; the silent one's port is 9001


class Opened:
    """A connection as aiokafka's client sees it once open."""

    def connected(self) -> bool:
        return True

    def close(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Ports connections were opened to; one to port 9001 never finishes opening (the
    broker took the TCP connection and answers no ApiVersions)."""
    ports: list[int] = []

    async def create_conn(host: str, port: int, **options: Any) -> Opened:
        if port == 9001:
            await asyncio.Event().wait()
        await asyncio.sleep(0.01)  # a round trip: others asking meanwhile wait for this one
        ports.append(port)
        return Opened()

    monkeypatch.setattr(aiokafka.client, "create_conn", create_conn)
    return ports


def client() -> KafkaClient:
    kafka = KafkaClient(bootstrap_servers="127.0.0.1:9000")
    kafka.cluster._brokers = {
        node: BrokerMetadata(node, "127.0.0.1", 9000 + node, None) for node in (SILENT, HEALTHY)
    }
    return kafka


async def test_a_silent_broker_holds_up_no_connection_to_another(opened: list[int]) -> None:
    kafka = client()
    stuck = asyncio.create_task(kafka._get_conn(SILENT))
    await asyncio.sleep(0.05)  # its connection is opening, its first request unanswered
    assert await asyncio.wait_for(kafka._get_conn(HEALTHY), 1) is not None
    assert await asyncio.wait_for(kafka._get_conn(HEALTHY, group=3), 1) is not None
    assert opened == [9002, 9002] and not stuck.done()
    stuck.cancel()


async def test_callers_of_one_connection_open_it_once(opened: list[int]) -> None:
    kafka = client()
    first, second = await asyncio.gather(kafka._get_conn(HEALTHY), kafka._get_conn(HEALTHY))
    assert first is second and opened == [9002]
