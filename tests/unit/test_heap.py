"""syncer.heap: `syncer run` freezes what it keeps out of the collector's passes once its
first plan is made and checked, and thaws, collects and freezes again after its copiers
change, so that what the plan dropped since is freed."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from functools import partial
from types import SimpleNamespace

import pytest

from syncer import cli, heap
from syncer.clusters import TP
from syncer.config import Config
from syncer.heap import settle_heap
from syncer.syncer import Syncer

CONFIG = Config.from_dict(
    {
        "local": {"bootstrap_servers": "l:9092"},
        "remotes": [{"name": "east", "bootstrap_servers": "r:9092"}],
        "topics": {"include": ["orders"]},
    }
)


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


def test_run_settles_the_heap_after_its_check_then_after_each_change_of_copiers(
    unfrozen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settled once the first plan is checked; then not again while the copiers stay as
    they are; once they changed, again when they have stood still for an interval."""
    calls: list[str] = []
    syncer = SimpleNamespace(copiers_changed=8)

    async def log_preflight(config: Config) -> None:
        calls.append("check")
        assert gc.get_freeze_count() == 0  # not before the check's own objects are gone

    def settle() -> None:
        calls.append("settle")
        settle_heap()

    monkeypatch.setattr(cli, "log_preflight", log_preflight)
    monkeypatch.setattr(heap, "settle_heap", settle)
    monkeypatch.setattr(heap, "SETTLE_EVERY_S", 0.01)

    async def intervals(n: int) -> None:
        for _ in range(n):
            await asyncio.sleep(0.01)

    async def scenario() -> None:
        task = asyncio.create_task(cli._check_then_keep_settled(CONFIG, syncer))  # type: ignore[arg-type]
        await intervals(10)
        assert calls == ["check", "settle"]  # steady: once
        syncer.copiers_changed += 3  # a rebalance took 3 partitions away
        async with asyncio.timeout(10):
            while calls.count("settle") < 2:
                await asyncio.sleep(0.005)
        await intervals(10)
        assert calls == ["check", "settle", "settle"]  # and no more while nothing changes
        task.cancel()

    asyncio.run(scenario())
    assert gc.get_freeze_count() > 0


def test_a_syncer_counts_the_copiers_it_drops() -> None:
    stopped: list[TP] = []
    tps = [TP("orders", 0), TP("orders", 1)]

    async def revoke() -> int:
        syncer = Syncer(CONFIG)  # made in the loop, as aiokafka's clients want
        for tp in tps:
            copier = SimpleNamespace(request_stop=partial(stopped.append, tp))
            syncer.copiers[tp] = copier  # type: ignore[assignment]
        await syncer._on_revoked(set(tps))
        return syncer.copiers_changed

    assert asyncio.run(revoke()) == 2
    assert sorted(stopped) == tps
