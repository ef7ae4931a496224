"""Blocking metadata probes, safe to call with or without a running event loop: does a
cluster answer, which brokers does it list, and where do a topic's partitions live."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from aiokafka import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest

T = TypeVar("T")


@dataclass(frozen=True)
class Placement:
    """Where one partition lives: its leader (-1 while it has none), its replicas in
    preference order (the first is the preferred leader) and those in sync."""

    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


async def _probe(bootstrap: str, limit_s: float) -> bool:
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=int(limit_s * 1000))
    try:
        await asyncio.wait_for(client.bootstrap(), limit_s)
        return bool(client.cluster.brokers())
    except Exception:
        return False
    finally:
        await client.close()


async def _metadata(bootstrap: str, topics: list[str], limit_s: float) -> Any:
    """One metadata answer for ``topics``, from a broker of the bootstrap list."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=int(limit_s * 1000))
    try:
        await asyncio.wait_for(client.bootstrap(), limit_s)
        node = client.get_random_node()
        return await asyncio.wait_for(client.send(node, MetadataRequest(topics, False)), limit_s)
    finally:
        await client.close()


async def _broker_ids(bootstrap: str, limit_s: float) -> set[int]:
    try:
        response = await _metadata(bootstrap, [], limit_s)
    except Exception:
        return set()
    return {broker[0] for broker in response.brokers}


async def placements_async(bootstrap: str, topic: str, limit_s: float = 10.0) -> list[Placement]:
    """Each partition of ``topic``: leader, replicas, in-sync replicas (aiokafka's own view
    keeps only the leader)."""
    response = await _metadata(bootstrap, [topic], limit_s)
    out = [
        Placement(p[1], p[2], tuple(p[3]), tuple(p[4]))
        for t in response.topics
        if t[1] == topic
        for p in t[3]
    ]
    return sorted(out, key=lambda p: p.partition)


def _blocking(coro: Coroutine[Any, Any, T]) -> T:
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def probe_metadata(bootstrap: str, timeout: float = 5.0) -> bool:
    """True if the cluster at ``bootstrap`` answers a metadata request with a broker."""
    return _blocking(_probe(bootstrap, timeout))


def broker_ids(bootstrap: str, timeout: float = 5.0) -> set[int]:
    """The brokers the cluster at ``bootstrap`` lists (registered and not fenced); none if it
    does not answer."""
    return _blocking(_broker_ids(bootstrap, timeout))


def placements(bootstrap: str, topic: str, timeout: float = 10.0) -> list[Placement]:
    """Blocking ``placements_async``."""
    return _blocking(placements_async(bootstrap, topic, timeout))


def leaders(bootstrap: str, topic: str, timeout: float = 10.0) -> dict[int, int]:
    """Partition → the node leading it (-1: none)."""
    return {p.partition: p.leader for p in placements(bootstrap, topic, timeout)}
