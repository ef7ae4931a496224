"""A TCP proxy on loopback that makes a long, thin link: it adds latency and caps each
connection's bandwidth (per direction), and can cut every connection on demand. Brokers behind
it advertise the proxy's address, so all client traffic crosses it.

    python -m syncer.testbed.proxy --listen 29092 --target 127.0.0.1:9092 \\
        --latency-ms 50 --rate 500000
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import time
from collections import deque
from typing import TYPE_CHECKING

from syncer.tasks import cancel_and_wait

if TYPE_CHECKING:
    from syncer.testbed.node import RunningCluster

log = logging.getLogger(__name__)

READ_SIZE = 16384


class _Bucket:
    """Token bucket: ``take(n)`` waits until n bytes may pass at ``rate`` bytes/s."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.tokens = 0.0
        self.stamp = time.monotonic()

    async def take(self, n: int) -> None:
        now = time.monotonic()
        self.tokens = min(self.rate * 0.05, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= n
        if self.tokens < 0:
            await asyncio.sleep(-self.tokens / self.rate)


class LinkProxy:
    """``async with LinkProxy(...) as proxy``; ``proxy.cut()`` drops every connection."""

    def __init__(
        self, listen_port: int, target: str, *, latency_ms: float = 0.0, rate: float | None = None
    ) -> None:
        self.listen_port = listen_port
        host, _, port = target.rpartition(":")
        self.target = (host or "127.0.0.1", int(port))
        self.latency = latency_ms / 2000  # half the round trip each way
        self.rate = rate
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.Task[None]] = set()
        self.bytes = 0
        self.accepted = 0  # connections accepted so far
        self._flowing = asyncio.Event()  # cleared by ``hold``: nothing is delivered
        self._flowing.set()

    @classmethod
    def in_front_of(
        cls, cluster: RunningCluster, *, latency_ms: float = 0.0, rate: float | None = None
    ) -> LinkProxy:
        """The proxy a bed cluster that advertises another address expects: listening on
        that address, forwarding to the broker's own listener."""
        port = int(cluster.advertised.rpartition(":")[2])
        return cls(port, cluster.listen, latency_ms=latency_ms, rate=rate)

    def __repr__(self) -> str:
        return (
            f"<LinkProxy :{self.listen_port} → {self.target[0]}:{self.target[1]}"
            f" [links: {len(self._links)}, rate: {self.rate}, latency: {self.latency * 2}s]>"
        )

    async def __aenter__(self) -> LinkProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.listen_port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        await self.cut()

    def hold(self) -> None:
        """Deliver nothing either way until ``release``: what is sent meanwhile waits here,
        in order, and the connections stay open (a peer that answers late, not a cut)."""
        self._flowing.clear()

    def release(self) -> None:
        self._flowing.set()

    async def cut(self) -> None:
        """Drop every open connection (new ones are still accepted)."""
        links = list(self._links)
        await cancel_and_wait(*links)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._links.add(task)
        self.accepted += 1
        # the accepted side is closed however this ends: a cut while the broker was still
        # being dialled left it open, and its unclosed socket failed a later test
        opened: list[asyncio.StreamWriter] = [writer]
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            opened.append(up_writer)
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # a cut, the broker down, or the other side went away
        finally:
            self._links.discard(task)
            await _closed(*opened)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        bucket = _Bucket(self.rate) if self.rate else None
        in_transit: deque[tuple[float, bytes]] = deque()
        arrived = asyncio.Event()
        done = False

        async def deliver() -> None:
            while in_transit or not done:
                if not in_transit:
                    arrived.clear()
                    await arrived.wait()
                    continue
                due, data = in_transit.popleft()
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(deliver())
        try:
            while data := await reader.read(READ_SIZE):
                if bucket is not None:
                    await bucket.take(len(data))
                self.bytes += len(data)
                in_transit.append((time.monotonic() + self.latency, data))
                arrived.set()
            done = True
            arrived.set()
            await sender
            if writer.can_write_eof():
                writer.write_eof()
        finally:
            sender.cancel()


async def _closed(*writers: asyncio.StreamWriter) -> None:
    """Close ``writers`` and give their transports the loop turn that finishes the close:
    a transport left closing when a test's event loop ended was collected during the next
    test, whose run then failed on its unclosed-socket warning."""
    for writer in writers:
        writer.close()
    waits = [asyncio.ensure_future(writer.wait_closed()) for writer in writers]
    try:
        await asyncio.wait(waits, timeout=1.0)
    finally:
        for wait in waits:
            if wait.done() and not wait.cancelled():
                wait.exception()  # a reset peer: retrieved, nothing to do
            else:
                wait.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--target", required=True, help="HOST:PORT of the broker")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added round trip")
    parser.add_argument(
        "--rate", type=float, default=None, help="bytes/s per connection and direction"
    )
    args = parser.parse_args()

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        async with LinkProxy(args.listen, args.target, latency_ms=args.latency_ms, rate=args.rate):
            await stop.wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
