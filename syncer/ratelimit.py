"""Bandwidth caps: a mirror never takes more than its share of a link.

A cap is a bucket of bytes that fills at ``bytes_per_s`` up to ``burst_s`` seconds' worth and
is paid after the fact: a fetch may go out while the balance is not negative, and what its
answer brought is taken off when it arrives. A fetch's size is known only once it is answered
(a broker sends whole batches, up to its limits), so paying before would have to guess; paid
after, one answer may overdraw the bucket, and the fetches after it wait until it is paid
back. Over any stretch of time the bytes taken are at most the rate times that time, plus
the burst, plus what the requests already out bring.

Time is passed in (seconds of a monotonic clock), so the rule is tested on plain values.
"""

from __future__ import annotations

from collections import deque

BURST_S = 0.25  # a full bucket holds this long at the cap: short, so the rate stays even
WINDOW_S = 5.0  # the measured rate is over this long


class ByteRate:
    """A cap on bytes per second (``bytes_per_s``; 0: none, only measured), and the rate
    measured under it."""

    def __init__(self, bytes_per_s: float, now: float, burst_s: float = BURST_S) -> None:
        if bytes_per_s < 0:
            raise ValueError(f"a cap must be positive (or 0 for none), got {bytes_per_s}")
        self.bytes_per_s = bytes_per_s
        self.burst = bytes_per_s * burst_s
        self._balance = self.burst
        self._at = now
        self._taken: deque[tuple[float, int]] = deque()  # (when, bytes) within WINDOW_S
        self._since = now

    def __repr__(self) -> str:
        return f"<ByteRate {self.bytes_per_s:,.0f} B/s, balance {self._balance:,.0f}>"

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._at)
        self._balance = min(self.burst, self._balance + elapsed * self.bytes_per_s)
        self._at = max(self._at, now)

    def wait_s(self, now: float) -> float:
        """How long until a fetch may go out: 0 while the balance is not negative."""
        if not self.bytes_per_s:
            return 0.0
        self._refill(now)
        return 0.0 if self._balance >= 0 else -self._balance / self.bytes_per_s

    def take(self, size: int, now: float) -> None:
        """An answer of ``size`` bytes arrived: pay for it."""
        self._refill(now)
        self._balance -= size
        self._taken.append((now, size))
        self._forget(now)

    def rate(self, now: float) -> float:
        """Bytes per second taken over the last ``WINDOW_S`` (or since the start)."""
        self._forget(now)
        span = min(WINDOW_S, now - self._since)
        return sum(size for _, size in self._taken) / span if span > 0 else 0.0

    def _forget(self, now: float) -> None:
        while self._taken and self._taken[0][0] < now - WINDOW_S:
            self._taken.popleft()


def wait_s(caps: tuple[ByteRate, ...], now: float) -> float:
    """How long until a fetch may go out under every one of ``caps``."""
    return max((cap.wait_s(now) for cap in caps), default=0.0)


def request_bytes(
    fetch_max_bytes: int, partition_max_bytes: int, caps: tuple[ByteRate, ...]
) -> int:
    """A fetch request's ``max_bytes``: under a cap, about a burst's worth (at least one
    partition's share), so answers pace the link evenly instead of in fetch-sized gulps (a
    4 MiB answer is most of a second of a 5 MB/s link)."""
    capped = [cap.bytes_per_s * BURST_S for cap in caps if cap.bytes_per_s]
    if not capped:
        return fetch_max_bytes
    return min(fetch_max_bytes, max(int(min(capped)), partition_max_bytes))
