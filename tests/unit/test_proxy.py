"""The test bed's link proxy closes the connection it accepted however the link ends: one
left open was collected during a later test, whose run then failed on the unclosed socket."""

from __future__ import annotations

import asyncio

import pytest

from syncer.testbed import proxy as proxy_module
from syncer.testbed.bed import free_port
from syncer.testbed.proxy import LinkProxy

_OPEN_CONNECTION = asyncio.open_connection  # the client's own, before a test replaces it


async def test_a_cut_while_the_broker_is_being_dialled_closes_the_accepted_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dialling = asyncio.Event()

    async def never_connects(*target: object) -> tuple[asyncio.StreamReader, object]:
        dialling.set()
        await asyncio.Event().wait()  # a broker that does not answer the connect
        raise AssertionError("unreachable")

    monkeypatch.setattr(proxy_module.asyncio, "open_connection", never_connects)
    async with LinkProxy(free_port(), "127.0.0.1:9") as link:
        reader, writer = await _dial(link.listen_port)
        try:
            writer.write(b"x" * 26)  # a request the proxy never forwards
            await asyncio.wait_for(dialling.wait(), 5)
            await link.cut()
            # the proxy closed its side: the client reads the end of the stream
            assert await asyncio.wait_for(reader.read(), 5) == b""
        finally:
            writer.close()
            await writer.wait_closed()
        assert not link._links


async def test_a_broker_that_refuses_the_connection_closes_the_accepted_one() -> None:
    async with LinkProxy(free_port(), f"127.0.0.1:{free_port()}") as link:  # nothing listens
        reader, writer = await _dial(link.listen_port)
        try:
            assert await asyncio.wait_for(reader.read(), 5) == b""
        finally:
            writer.close()
            await writer.wait_closed()
        assert link.accepted == 1 and not link._links


async def _dial(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(_OPEN_CONNECTION("127.0.0.1", port), 5)
