"""The daemon's long-lived objects kept out of the cyclic garbage collector's passes.

Python's collector walks every tracked object in its oldest generation on each full pass:
in `syncer run` that is the imports, the config, the clients and every copier of the plan,
objects that live as long as the process. Tailing 8 partitions at 5 MB/s (`make
bench-steady`), full passes came every ~30 s and stopped the event loop for 31-44 ms each
time, every partition's copy with it (2026-12-04: two of a round's 17 bursts of records
above the hop's p99 began with one). ``settle_heap`` collects once, then freezes what is
left (``gc.freeze``): later passes only walk what was made since, and the loop's stops
shrink to what the copy itself keeps (the same benchmark after: one 16 ms pass, the
freeze's own, at the start; later full passes 4 and 6 ms).

A frozen object that later ends up in a garbage cycle (a copier whose partition went to
another member of the group) is not collected while frozen, so ``keep_heap_settled``
thaws, collects and freezes again once the copiers have changed and then stood still for
``SETTLE_EVERY_S``: what the plan dropped is freed then, at the price of one full pass."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

SETTLE_EVERY_S = 600.0


def settle_heap() -> None:
    """Thaw what an earlier call froze, collect, then move every object still alive into
    the collector's permanent generation, out of its passes."""
    started = time.monotonic()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    log.debug(
        "heap settled: %d objects frozen in %.0f ms",
        gc.get_freeze_count(),
        (time.monotonic() - started) * 1000,
    )


async def keep_heap_settled(changes: Callable[[], int]) -> None:
    """``settle_heap`` now; again once ``changes()`` (copiers made and dropped) has moved
    since the last settle and then held still for ``SETTLE_EVERY_S`` (the copiers dropped
    have ended by then), looked at every ``SETTLE_EVERY_S``. A steady daemon settles once:
    a full pass over 10,000 partitions' objects is no stop to make for nothing."""
    settled = seen = changes()
    settle_heap()
    while True:
        await asyncio.sleep(SETTLE_EVERY_S)
        now = changes()
        if now != settled and now == seen:
            settle_heap()
            settled = now
        seen = now
