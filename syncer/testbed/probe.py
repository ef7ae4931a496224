"""A blocking metadata probe, safe to call with or without a running event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures

from aiokafka import AIOKafkaClient


async def _probe(bootstrap: str, limit_s: float) -> bool:
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=int(limit_s * 1000))
    try:
        await asyncio.wait_for(client.bootstrap(), limit_s)
        return bool(client.cluster.brokers())
    except Exception:
        return False
    finally:
        await client.close()


def probe_metadata(bootstrap: str, timeout: float = 5.0) -> bool:
    """True if the cluster at ``bootstrap`` answers a metadata request with a broker."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _probe(bootstrap, timeout)).result()
