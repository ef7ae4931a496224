"""syncer.heap: `syncer run` freezes what it keeps out of the collector's passes once its
first plan is made and checked, even if the check fails."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from syncer import cli
from syncer.config import Config
from syncer.heap import settle_heap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_settle_heap_moves_live_objects_out_of_the_collectors_passes(unfrozen: None) -> None:
    kept = [object() for _ in range(10)]
    tracked = [[i] for i in range(1000)]  # lists are tracked by the collector
    assert gc.get_freeze_count() == 0
    settle_heap()
    assert gc.get_freeze_count() >= len(tracked)
    # what the process makes afterwards is collected as before
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1
    assert kept and tracked


@pytest.mark.parametrize("check_fails", [False, True])
def test_run_settles_the_heap_after_its_check(
    unfrozen: None, monkeypatch: pytest.MonkeyPatch, check_fails: bool
) -> None:
    calls: list[str] = []

    async def log_preflight(config: Config) -> None:
        calls.append("check")
        assert gc.get_freeze_count() == 0  # not before the check's own objects are gone
        if check_fails:
            raise RuntimeError("remote down")

    monkeypatch.setattr(cli, "log_preflight", log_preflight)
    config = Config.from_dict(
        {
            "local": {"bootstrap_servers": "l:9092"},
            "remotes": [{"name": "east", "bootstrap_servers": "r:9092"}],
            "topics": {"include": ["orders"]},
        }
    )
    if check_fails:
        with pytest.raises(RuntimeError, match="remote down"):
            asyncio.run(cli._check_then_settle(config))
    else:
        asyncio.run(cli._check_then_settle(config))
    assert calls == ["check"]
    assert gc.get_freeze_count() > 0
