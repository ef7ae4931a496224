"""What a copy waits on, for the catch-up benchmark (#23): off unless the environment names a
file in ``SYNCER_WAITS``; then the writer and the chunk schedulers count, and the counts go
to that file as JSON when the process exits. Nothing here decides anything: a benchmark that
runs below the brokers' limit while the cores are not busy must show where the time goes
(requests in flight, how long a ready batch waits for its request, how long a copier waits
for a fetch answer against for its own writes), and a profile shows only what runs."""

from __future__ import annotations

import atexit
import json
import os
from pathlib import Path

ENV = "SYNCER_WAITS"


class Levels:
    """A count that steps up and down (requests in flight): how long it stood at each value
    from its first step to its last, so its time-average and its idle share (time at 0)."""

    def __init__(self) -> None:
        self.value = 0
        self.seconds: dict[int, float] = {}  # value → seconds it stood there
        self._since: float | None = None

    def step(self, delta: int, now: float) -> None:
        if self._since is not None:
            self.seconds[self.value] = self.seconds.get(self.value, 0.0) + now - self._since
        self.value += delta
        self._since = now

    @property
    def span(self) -> float:
        return sum(self.seconds.values())

    def mean(self) -> float:
        span = self.span
        return sum(v * s for v, s in self.seconds.items()) / span if span else 0.0

    def as_dict(self) -> dict[str, object]:
        span = self.span
        return {
            "mean": round(self.mean(), 3),
            "span_s": round(span, 3),
            "share_at": {v: round(s / span, 3) for v, s in sorted(self.seconds.items())}
            if span
            else {},
        }


class Tally:
    """Values of one kind (seconds, bytes): count, total, mean and quantiles. Kept whole:
    only a benchmark keeps them, for some 10^5 values at most."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def add(self, value: float) -> None:
        self.values.append(value)

    def as_dict(self) -> dict[str, float]:
        if not self.values:
            return {"count": 0}
        ranked = sorted(self.values)
        n = len(ranked)

        def at(q: float) -> float:
            return round(ranked[min(n - 1, int(q * n))], 6)

        total = sum(ranked)
        return {
            "count": n,
            "total": round(total, 6),
            "mean": round(total / n, 6),
            "p50": at(0.5),
            "p90": at(0.9),
            "p99": at(0.99),
            "max": round(ranked[-1], 6),
        }


class WriterWaits:
    """One writer's: requests in flight per node and over all nodes, each request's batches,
    bytes and seconds from written to answered, and each batch's wait from submitted to
    written (behind a full pipeline, a leader refresh or a loop turn)."""

    def __init__(self) -> None:
        self.in_flight: dict[int, Levels] = {}
        self.any_in_flight = Levels()  # all nodes: its time at 0 is the writer idle
        self.request_batches = Tally()
        self.request_bytes = Tally()
        self.request_s = Tally()
        self.queued_s = Tally()

    def sent(self, node: int, now: float, waited: list[float], nbytes: int) -> None:
        self.in_flight.setdefault(node, Levels()).step(1, now)
        self.any_in_flight.step(1, now)
        self.request_batches.add(len(waited))
        self.request_bytes.add(nbytes)
        for seconds in waited:
            self.queued_s.add(seconds)

    def answered(self, node: int, now: float, seconds: float) -> None:
        self.in_flight[node].step(-1, now)
        self.any_in_flight.step(-1, now)
        self.request_s.add(seconds)

    def as_dict(self) -> dict[str, object]:
        return {
            "in_flight_by_node": {n: lv.as_dict() for n, lv in self.in_flight.items()},
            "in_flight": self.any_in_flight.as_dict(),
            "request_batches": self.request_batches.as_dict(),
            "request_bytes": self.request_bytes.as_dict(),
            "request_s": self.request_s.as_dict(),
            "batch_queued_s": self.queued_s.as_dict(),
        }


class ChunkWaits:
    """All partitions' chunk schedulers together: each wait of a copier for a fetch answer
    (``next_ready`` with nothing ready), and the copier's time from taking a chunk to asking
    for the next: its checks and writes, mostly the wait for room among its own writes in
    flight (``PartitionWrites.room``). Also each fetch's seconds and bytes."""

    def __init__(self) -> None:
        self.fetch_wait_s = Tally()
        self.writing_s = Tally()
        self.starved_s = Tally()  # between a return for want of budget and the next ask
        self.ready_at_once = 0  # asks answered by a chunk already fetched
        self.fetch_s = Tally()
        self.fetch_bytes = Tally()

    def as_dict(self) -> dict[str, object]:
        return {
            "fetch_wait_s": self.fetch_wait_s.as_dict(),
            "writing_s": self.writing_s.as_dict(),
            "starved_s": self.starved_s.as_dict(),
            "ready_at_once": self.ready_at_once,
            "fetch_s": self.fetch_s.as_dict(),
            "fetch_bytes": self.fetch_bytes.as_dict(),
        }


class Recorder:
    """The process's counts, written to ``path`` as JSON by ``dump``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.writers: dict[str, WriterWaits] = {}
        self.chunks = ChunkWaits()

    def writer(self, name: str) -> WriterWaits:
        return self.writers.setdefault(name, WriterWaits())

    def as_dict(self) -> dict[str, object]:
        return {
            "writers": {name: w.as_dict() for name, w in self.writers.items()},
            "chunks": self.chunks.as_dict(),
        }

    def dump(self) -> None:
        self.path.write_text(json.dumps(self.as_dict(), indent=1) + "\n")


def _from_env() -> Recorder | None:
    path = os.environ.get(ENV)
    if not path:
        return None
    recorder = Recorder(Path(path))
    atexit.register(recorder.dump)
    return recorder


RECORDER: Recorder | None = _from_env()
