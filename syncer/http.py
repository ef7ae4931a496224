"""The daemon's HTTP endpoint, on asyncio streams (GET only, one request per connection):

- ``/metrics``: Prometheus text format, of the Syncer's registry (the host's, if it passed
  one to ``Syncer``);
- ``/status``: this process's partitions and remotes as JSON (``syncer status`` reads it);
- ``/healthz``: 200 while the event loop answers in time;
- ``/readyz``: 200 while the local cluster answers and no copier of this process has halted
  everything it owns.

    async with StatusServer(syncer, ("127.0.0.1", 9644)) as server:
        print(server.url)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST

from syncer.errors import ConfigError
from syncer.metrics import exposition
from syncer.status import State, status_document
from syncer.syncer import Syncer
from syncer.tasks import cancel_and_wait

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 2.0
PROBE_TIMEOUT_S = 3.0
LOOP_LATE_S = 5.0  # a loop tick this late makes /healthz fail


@dataclass
class Probe:
    """What the readiness and liveness probes last saw."""

    local_ok: bool = False
    local_error: str | None = "not probed yet"
    last_tick: float = 0.0


class StatusServer:
    def __init__(self, syncer: Syncer, address: tuple[str, int]) -> None:
        self.syncer = syncer
        self.address = address
        self.registry = syncer.registry  # the host's, if it passed one
        self.probe = Probe()
        self._server: asyncio.Server | None = None
        self._prober: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def __aenter__(self) -> StatusServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        host, port = self.address
        try:
            self._server = await asyncio.start_server(self._serve, host, port)
        except OSError as exc:
            # a name that does not resolve is a gaierror, whose errno is not an OS error's
            errno = None if isinstance(exc, socket.gaierror) else exc.errno
            reason = os.strerror(errno) if errno else (exc.strerror or str(exc))
            raise ConfigError([f"cannot listen on {host}:{port}: {reason}"], "http.listen") from exc
        self.probe.last_tick = time.monotonic()
        self._prober = asyncio.create_task(self._probe_forever(), name="readiness-probe")
        log.info("serving /metrics /status /healthz /readyz on %s", self.url)

    async def stop(self) -> None:
        if self._prober is not None:
            await cancel_and_wait(self._prober)
            self._prober = None
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _probe_forever(self) -> None:
        while True:
            self.probe.last_tick = time.monotonic()
            try:
                ok = await asyncio.wait_for(self.syncer.local.reachable(), PROBE_TIMEOUT_S)
                self.probe.local_ok, self.probe.local_error = ok, None if ok else "no answer"
            except TimeoutError:
                self.probe.local_ok, self.probe.local_error = False, "probe timed out"
            except Exception as exc:  # the probe must outlive any cluster trouble
                self.probe.local_ok, self.probe.local_error = False, f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(PROBE_INTERVAL_S)

    # HTTP -------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, _, rest = request.decode("latin-1").partition(" ")
            path = rest.partition(" ")[0].partition("?")[0]
            if method != "GET":
                status, kind, body = 405, "text/plain", b"GET only\n"
            else:
                status, kind, body = self._route(path)
            head = (
                f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\n"
                f"Content-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _route(self, path: str) -> tuple[int, str, bytes]:
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, exposition(self.registry)
        if path == "/status":
            document = status_document(self.syncer.snapshot())
            return 200, "application/json", json.dumps(document).encode()
        if path == "/healthz":
            late = time.monotonic() - self.probe.last_tick - PROBE_INTERVAL_S
            if late > LOOP_LATE_S:
                return 503, "text/plain", f"event loop {late:.1f}s late\n".encode()
            return 200, "text/plain", b"ok\n"
        if path == "/readyz":
            problems = self.not_ready()
            if problems:
                return 503, "text/plain", ("\n".join(problems) + "\n").encode()
            return 200, "text/plain", b"ready\n"
        return 404, "text/plain", b"not found: try /metrics /status /healthz /readyz\n"

    def not_ready(self) -> list[str]:
        problems = []
        if not self.probe.local_ok:
            problems.append(f"local cluster unreachable: {self.probe.local_error}")
        partitions = self.syncer.snapshot().partitions
        if partitions and all(s.state is State.HALTED for s in partitions):
            problems.append(f"all {len(partitions)} partitions of this process halted")
        return problems


_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}
