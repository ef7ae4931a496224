"""The daemon's long-lived objects kept out of the cyclic garbage collector's passes.

Python's collector walks every tracked object in its oldest generation on each full pass:
in `syncer run` that is the imports, the config, the clients and every copier of the plan,
objects that live as long as the process. Tailing 8 partitions at 5 MB/s (`make
bench-steady`), full passes came every ~30 s and stopped the event loop for 31-44 ms each
time, every partition's copy with it (2026-12-04: two of a round's 17 bursts of records
above the hop's p99 began with one). ``settle_heap`` collects once, then freezes what is
left (``gc.freeze``): later passes only walk what was made since, and the loop's stops
shrink to what the copy itself keeps (the same benchmark after: one 16 ms pass, the
freeze's own, at the start; later full passes 4 and 6 ms). The price: a frozen object
that later ends up in a garbage cycle (a copier of the first plan whose partition went to
another member) is never collected, only what reference counting frees is; at most what
the first plan held, once."""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)


def settle_heap() -> None:
    """Collect, then move every object still alive into the collector's permanent
    generation, out of its passes (once the process has built what it keeps: the plan)."""
    started = time.monotonic()
    gc.collect()
    gc.freeze()
    log.debug(
        "heap settled: %d objects frozen in %.0f ms",
        gc.get_freeze_count(),
        (time.monotonic() - started) * 1000,
    )
