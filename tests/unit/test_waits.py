"""The benchmark's counts of what a copy waits on (``syncer.waits``): time at each level of a
count, quantiles of a tally, and a real Writer counting its requests when asked to."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import syncer.chunks
import syncer.writer
from syncer.clusters import FetchedPartition
from syncer.waits import Levels, Recorder, Tally
from syncer.writer import Writer
from tests.unit.test_chunk_wakeup import TAIL, records, waiting_copier
from tests.unit.test_writer_now import A2, A, Direct


def test_levels_weigh_each_value_by_how_long_it_stood() -> None:
    levels = Levels()
    levels.step(1, 10.0)  # 0 → 1 at 10 s: nothing counted before the first step
    levels.step(1, 11.0)  # 1 for 1 s
    levels.step(-2, 14.0)  # 2 for 3 s
    levels.step(1, 16.0)  # 0 for 2 s
    assert levels.seconds == {1: 1.0, 2: 3.0, 0: 2.0}
    assert levels.mean() == pytest.approx((1 * 1 + 2 * 3) / 6)
    assert levels.as_dict()["share_at"] == {0: 0.333, 1: 0.167, 2: 0.5}


def test_a_tally_gives_quantiles_of_what_it_saw() -> None:
    tally = Tally()
    for value in range(1, 101):
        tally.add(float(value))
    got = tally.as_dict()
    assert (got["count"], got["mean"], got["p50"], got["p90"], got["max"]) == (
        100,
        50.5,
        51.0,
        91.0,
        100.0,
    )
    assert Tally().as_dict() == {"count": 0}


async def test_the_writer_counts_requests_batches_and_flight(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    recorder = Recorder(tmp_path / "waits.json")
    monkeypatch.setattr(syncer.writer, "RECORDER", recorder)
    cluster = Direct()
    async with Writer(cluster, max_in_flight=1) as writer:  # type: ignore[arg-type]
        await asyncio.sleep(0)
        first = writer.submit(A, b"a")  # written at once
        # one request, after it (A2 writes on A's connection)
        second = [writer.submit(A, b"aa"), writer.submit(A2, b"bbb")]
        await asyncio.gather(first, *second)
    waits = recorder.writers[writer.name]
    assert waits.request_batches.values == [1, 2]
    assert waits.request_bytes.values == [1, 5]
    assert len(waits.queued_s.values) == 3
    assert waits.queued_s.values[0] < 0.005 < min(waits.queued_s.values[1:])  # behind one
    assert waits.any_in_flight.value == 0 and set(waits.any_in_flight.seconds) == {0, 1}
    assert waits.any_in_flight.seconds[1] > 0.015  # two requests of 10 ms, one at a time
    recorder.dump()
    assert json.loads(recorder.path.read_text())["writers"][writer.name]["in_flight"]["mean"] > 0.9


async def test_the_writer_counts_nothing_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(syncer.writer, "RECORDER", None)
    async with Writer(Direct(), max_in_flight=1) as writer:  # type: ignore[arg-type]
        assert writer.waits is None
        await writer.submit(A, b"a")


async def test_a_copier_s_wait_for_its_fetch_is_counted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    recorder = Recorder(tmp_path / "waits.json")
    monkeypatch.setattr(syncer.chunks, "RECORDER", recorder)
    remote, _scheduler, copier = await waiting_copier()
    await asyncio.sleep(0.02)  # the copier waits this long for the answer
    assert remote.answer is not None
    remote.answer.set_result(FetchedPartition(0, TAIL + 3, TAIL + 3, 0, (), records(TAIL, 3)))
    remote.answered()
    assert await copier is not None
    waits = recorder.chunks
    assert waits.fetch_wait_s.values[0] >= 0.02 and waits.ready_at_once == 0
    assert waits.fetch_bytes.values == [len(records(TAIL, 3))]
    assert waits.writing_s.values == []  # no chunk taken before this one
