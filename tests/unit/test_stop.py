"""A daemon asked to stop does not wait for a topic refresh that is still retrying: a local
broker left unanswered behind a cut link held one past the 30 s a SIGTERM is given."""

from __future__ import annotations

import asyncio

import pytest

from syncer.syncer import Syncer
from tests.unit.test_library import in_code


async def test_a_stop_ends_the_run_loop_while_a_topic_refresh_hangs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    syncer = Syncer(in_code())
    refreshing = asyncio.Event()

    async def refresh_forever() -> None:
        refreshing.set()
        await asyncio.Event().wait()  # retrying a broker that never answers

    monkeypatch.setattr(syncer, "refresh_topics", refresh_forever)
    running = asyncio.create_task(syncer._run_until_stopped())
    await refreshing.wait()
    syncer.request_stop()
    await asyncio.wait_for(running, 2)
