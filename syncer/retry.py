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

from syncer.config import CopierConfig
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


def next_backoff(
    backoff: float,
    moved: bool,
    config: CopierConfig,
    *,
    healthy_s: float = 0.0,
    leader_moved: bool = False,
) -> float:
    """The wait before resuming after an error, given ``backoff``, the wait after the error
    before it (0 if none). The first step again if this error follows a healthy stretch:
    records were copied since the last retry resumed (``moved``), or it ran for longer than
    the cap without an error (``healthy_s``), or it is a leader that moved (the metadata is
    refreshed at once, and waiting longer would not bring the new leader sooner). Else twice
    as long, up to the cap: an error that keeps coming back is not asked of the broker every
    step. Decided when the error comes, so the first error after an hour of copying does not
    wait out what was left of an old backoff (issue 19: up to ``retry_backoff_max_ms``)."""
    first = config.retry_backoff_ms / 1000
    cap = config.retry_backoff_max_ms / 1000
    if moved or leader_moved or healthy_s > cap or backoff < first:
        return first
    return min(backoff * 2, cap)
