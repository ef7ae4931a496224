"""syncer.heap: `syncer run` freezes what it keeps out of the collector's passes once its
first plan is made and checked, and thaws, collects and freezes again now and then, so that
what the plan dropped since is freed."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from syncer import cli, heap
from syncer.config import Config
from syncer.heap import settle_heap


class Copier:
    """Stands for a copier: in a reference cycle, as tasks and callbacks make them."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_settle_heap_moves_live_objects_out_of_the_collectors_passes(unfrozen: None) -> None:
    tracked = [[i] for i in range(1000)]  # lists are tracked by the collector
    assert gc.get_freeze_count() == 0
    settle_heap()
    assert gc.get_freeze_count() >= len(tracked)
    # what the process makes afterwards is collected as before
    made_after = Copier()
    gone = weakref.ref(made_after)
    del made_after
    gc.collect()
    assert gone() is None


def test_a_frozen_cycle_dropped_later_is_freed_by_the_next_settle(unfrozen: None) -> None:
    copier = Copier()  # of the first plan
    gone = weakref.ref(copier)
    settle_heap()
    del copier  # its partition went to another member
    gc.collect()
    assert gone() is not None  # frozen: out of the collector's reach
    settle_heap()
    assert gone() is None


def test_run_settles_the_heap_after_its_check_and_again_and_again(
    unfrozen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    async def log_preflight(config: Config) -> None:
        calls.append("check")
        assert gc.get_freeze_count() == 0  # not before the check's own objects are gone

    def settle() -> None:
        calls.append("settle")
        settle_heap()

    monkeypatch.setattr(cli, "log_preflight", log_preflight)
    monkeypatch.setattr(heap, "settle_heap", settle)
    monkeypatch.setattr(heap, "SETTLE_EVERY_S", 0.01)
    config = Config.from_dict(
        {
            "local": {"bootstrap_servers": "l:9092"},
            "remotes": [{"name": "east", "bootstrap_servers": "r:9092"}],
            "topics": {"include": ["orders"]},
        }
    )

    async def three_settles() -> None:
        task = asyncio.create_task(cli._check_then_keep_settled(config))
        async with asyncio.timeout(10):
            while calls.count("settle") < 3:
                await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(three_settles())
    assert calls[:4] == ["check", "settle", "settle", "settle"]
    assert gc.get_freeze_count() > 0
