"""Retries with tenacity: exactly the retriable errors, exponential backoff with jitter."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from syncer.errors import SyncerError

log = logging.getLogger(__name__)

T = TypeVar("T")

# retries of cluster operations so far, by what was retried (process-wide: every Syncer of
# the process counts here; /metrics shows it as syncer_cluster_retries_total)
RETRIES: Counter[str] = Counter()


def _before_sleep(what: str, state: RetryCallState) -> None:
    RETRIES[what] += 1
    log.info("%s: retrying after %s", what, state.outcome.exception() if state.outcome else "?")


def is_retriable(exc: BaseException) -> bool:
    return isinstance(exc, SyncerError) and exc.retriable


async def retried(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    initial_s: float = 0.1,
    max_s: float = 5.0,
    give_up_after_s: float = 60.0,
) -> T:
    """Await ``call()`` until it succeeds, retrying retriable errors with backoff and jitter
    for at most ``give_up_after_s``; other errors propagate at once."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(is_retriable),
        wait=wait_random_exponential(multiplier=initial_s, max=max_s),
        stop=stop_after_delay(give_up_after_s),
        reraise=True,
        before_sleep=partial(_before_sleep, what),
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable")  # pragma: no cover
