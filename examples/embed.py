"""A small asyncio service that runs a Syncer beside its own work.

    python examples/embed.py --local localhost:9092 --remote east=east:9092 \
        --topic 'orders.*' --port 8080

It shows the library as a host uses it, with no dependency beyond syncer's own:

- the config is built in code (checked like a file: a mistake is a ``ConfigError`` listing
  every problem);
- syncer's metrics go into the service's own Prometheus registry, beside its own metric, and
  the service serves that registry on its own port (``/metrics``), with syncer's status as
  it wants to show it (``/status``) and the events it received (``/events``);
- it logs syncer's events as they come (partition halted, caught up, resumed; remote
  dropped, back), configuring logging itself: syncer only logs through its loggers;
- it handles SIGTERM and SIGINT itself: the syncer drains and the service exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import signal
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

from syncer import (
    CaughtUp,
    ClusterConfig,
    Config,
    Event,
    Halted,
    RemoteDropped,
    Subscription,
    Syncer,
    SyncerError,
    TopicsConfig,
)

log = logging.getLogger("embed")


class Service:
    """The host: its own work (a heartbeat it counts), its HTTP port, and the Syncer."""

    def __init__(self, syncer: Syncer, registry: CollectorRegistry) -> None:
        self.syncer = syncer
        self.registry = registry
        self.heartbeats = Counter("embed_heartbeats", "The service's own work", registry=registry)
        self.seen: list[dict[str, Any]] = []  # every event received, for /events

    async def heartbeat(self) -> None:
        while True:
            self.heartbeats.inc()
            await asyncio.sleep(0.5)

    async def watch(self, events: Subscription) -> None:
        """Log each event; a halted partition or a dropped remote is worth a warning."""
        async for event in events:
            self.seen.append(describe(event))
            level = logging.WARNING if isinstance(event, Halted | RemoteDropped) else logging.INFO
            log.log(level, "syncer event: %s", event)
            if isinstance(event, CaughtUp):
                log.info("%s[%d] caught up at %d", event.tp.topic, event.tp.partition, event.end)
        log.info("event stream ended (%d dropped)", events.dropped)

    def status(self) -> dict[str, Any]:
        snapshot = self.syncer.snapshot()
        return {
            "partitions": [
                {
                    "topic": p.tp.topic,
                    "partition": p.tp.partition,
                    "state": p.state.value,
                    "local_end": p.local_end,
                    "lag": p.lag,
                }
                for p in snapshot.partitions
            ],
            "remotes": {r.name: r.state for r in snapshot.remotes},
        }

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One GET per connection: /metrics, /status, /events."""
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            path = request.decode("latin-1").split(" ")[1]
            code, kind, body = 200, "application/json", b""
            if path == "/metrics":
                kind, body = CONTENT_TYPE_LATEST, generate_latest(self.registry)
            elif path == "/status":
                body = json.dumps(self.status()).encode()
            elif path == "/events":
                body = json.dumps(self.seen).encode()
            else:
                code, kind, body = 404, "text/plain", b"try /metrics /status /events\n"
            head = f"HTTP/1.1 {code} OK\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}"
            writer.write(head.encode() + b"\r\nConnection: close\r\n\r\n" + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            pass
        finally:
            writer.close()


def describe(event: Event) -> dict[str, Any]:
    """An event as JSON: its kind and fields, a partition as topic and partition."""
    out: dict[str, Any] = {"event": type(event).__name__}
    for field in dataclasses.fields(event):
        value = getattr(event, field.name)
        if field.name == "tp":
            out["topic"], out["partition"] = value.topic, value.partition
        else:
            out[field.name] = value
    return out


def config_from(args: argparse.Namespace) -> Config:
    remotes = []
    for remote in args.remote:
        name, _, bootstrap = remote.partition("=")
        remotes.append(ClusterConfig(bootstrap, name=name))
    return Config(
        local=ClusterConfig(args.local),
        remotes=tuple(remotes),
        topics=TopicsConfig(include=tuple(args.topic)),
        name=args.name,
    )


async def main(args: argparse.Namespace) -> int:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    registry = CollectorRegistry()  # the service's own: syncer's metrics join it
    try:
        syncer = Syncer(config_from(args), registry=registry)
    except SyncerError as exc:
        log.error("cannot start: %s", exc)
        return 2
    service = Service(syncer, registry)
    server = await asyncio.start_server(service.serve, "127.0.0.1", args.port)
    log.info("serving /metrics /status /events on http://127.0.0.1:%d", args.port)
    events = syncer.events()  # subscribed before it starts: no event is missed
    async with server, syncer:
        work = [
            asyncio.create_task(service.heartbeat(), name="heartbeat"),
            asyncio.create_task(service.watch(events), name="events"),
        ]
        copying = asyncio.create_task(syncer.run(), name="syncer")
        stop = asyncio.create_task(stopping.wait())
        await asyncio.wait([copying, stop], return_when=asyncio.FIRST_COMPLETED)
        log.info("stopping")
        syncer.request_stop()
        try:
            summary = await copying
        except SyncerError as exc:
            log.error("syncer stopped: %s", exc)
            return 1
        finally:
            stop.cancel()
            work[0].cancel()
        log.info("%s", summary.line())
    await work[1]  # the syncer stopped: the event stream ends once read
    with contextlib.suppress(asyncio.CancelledError):
        await work[0]
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local", required=True, help="local bootstrap servers")
    parser.add_argument("--remote", action="append", required=True, help="name=bootstrap")
    parser.add_argument("--topic", action="append", required=True, help="topic pattern")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--name", default="embedded")
    return parser.parse_args(argv)


if __name__ == "__main__":
    # the host configures logging as it likes; syncer's loggers follow it
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    raise SystemExit(asyncio.run(main(parse())))
