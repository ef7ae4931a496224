"""The bandwidth caps a fetcher's requests obey (``ratelimit.ByteRate``): while one is
overdrawn no request goes out, and the fetcher is woken once it is paid back; each answer's
bytes are paid when it arrives."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from syncer.ratelimit import ByteRate, wait_s


class CapGate:
    """``closed()`` before sending, ``paid(size)`` after each answer."""

    def __init__(self, caps: tuple[ByteRate, ...], wakeup: Callable[[], None]) -> None:
        self.caps = caps
        self._limits = tuple(cap for cap in caps if cap.bytes_per_s)  # the rest only measure
        self._wakeup = wakeup
        self._timer: asyncio.TimerHandle | None = None  # the wake-up once paid back

    @property
    def limited(self) -> bool:
        """Is a cap set? (Else ``closed`` never is.)"""
        return bool(self._limits)

    def closed(self) -> bool:
        """Is a cap overdrawn? Then the fetcher is woken again when it is paid back."""
        if self._timer is not None:
            return True  # a wake-up is set for when it is
        if not self._limits:  # none set: every pass of the fetcher asks
            return False
        hold = wait_s(self._limits, time.monotonic())
        if hold > 0:
            self._timer = asyncio.get_running_loop().call_later(hold, self._reopen)
        return hold > 0

    def _reopen(self) -> None:
        self._timer = None
        self._wakeup()

    def paid(self, size: int) -> None:
        now = time.monotonic()
        for cap in self.caps:
            cap.take(size, now)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
