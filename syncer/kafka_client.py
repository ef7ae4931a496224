"""aiokafka's client, opening its connections to different brokers side by side.

``AIOKafkaClient`` opens every connection under one lock per client, and opening one
includes its first request (ApiVersions, then the SASL handshake). A broker that takes the
TCP connection but answers nothing - restarting (its socket is bound seconds before it
serves requests), paused, or behind a link that drops what it sends - so held up every new
connection of the client, to every broker, up to the request timeout: the metadata refresh
meant to route around the failing broker, and the fetches of healthy brokers' partitions on
a connection not yet open, waited with it (a kill -9 and restart of one remote broker
stalled the other brokers' partitions 8.9 s). Here each connection (broker and connection
group) has a lock of its own: two callers of one connection still open it once, and a
broker that does not answer holds up only its own connections.

Metadata is asked on a connection of its own (``METADATA_CONNECTION``): a broker answers
one connection's requests in order, and on the default connection, shared with a
partition's polls, a refresh waited for the poll ahead of it (up to its wait, 0.2 to 0.4 s
measured) while every partition of the topics refreshed was held (``syncer.leaders``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from typing import Any

from aiokafka import AIOKafkaClient
from aiokafka.client import ConnectionGroup
from aiokafka.protocol.metadata import MetadataRequest

from syncer.frames import read_as_it_comes

# the connection number metadata is asked on (syncer.fetcher's are 0 to 9)
METADATA_CONNECTION = 10


class KafkaClient(AIOKafkaClient):  # type: ignore[misc]  # aiokafka has no type hints
    """``AIOKafkaClient`` with one lock per connection instead of one per client."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._opening: defaultdict[tuple[Any, Any], asyncio.Lock] = defaultdict(asyncio.Lock)

    @property
    def _get_conn_lock(self) -> contextlib.nullcontext[None]:
        """What aiokafka opens every connection under: nothing (``_get_conn`` holds the
        lock of the one connection it opens)."""
        return contextlib.nullcontext()

    async def _get_conn(
        self, node_id: Any, *, group: Any = ConnectionGroup.DEFAULT, no_hint: bool = False
    ) -> Any:
        async with self._opening[(node_id, group)]:
            before = self._conns.get((node_id, group))
            conn = await super()._get_conn(node_id, group=group, no_hint=no_hint)
            if conn is not None and conn is not before:  # opened just now: nothing in flight
                read_as_it_comes(conn)  # its answers handed on in the read callback
            return conn

    async def metadata(self, node: int) -> Any:
        """Every topic's metadata, asked of ``node`` on the connection kept for it."""
        return await self.send(node, MetadataRequest(None, False), group=METADATA_CONNECTION)
