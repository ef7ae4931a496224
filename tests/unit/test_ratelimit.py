"""Bandwidth caps: the bucket paid after each answer, on plain values, and the fetcher
holding its requests while a cap is overdrawn."""

from __future__ import annotations

import asyncio
import time

import pytest

from syncer.clusters import TP, FetchedPartition
from syncer.config import CopierConfig
from syncer.fetcher import Fetcher
from syncer.ratelimit import BURST_S, ByteRate, request_bytes, wait_s
from tests.unit.test_fetcher import Broker

MB = 1_000_000


def greedy(cap: ByteRate, size: int, seconds: float, step: float = 0.001) -> int:
    """Bytes taken by a sender that sends ``size`` bytes whenever the cap lets it, for
    ``seconds`` of simulated time."""
    taken, now = 0, 0.0
    while now < seconds:
        if cap.wait_s(now) == 0:
            cap.take(size, now)
            taken += size
        now += step
    return taken


@pytest.mark.parametrize("rate", [5 * MB, 20 * MB])
@pytest.mark.parametrize("size", [64 * 1024, 1024 * 1024, 4 * 1024 * 1024])
def test_a_greedy_sender_takes_the_cap_within_a_burst_and_one_answer(rate: int, size: int) -> None:
    """Over 30 s, what a sender that never stops takes is the cap times the time, give or
    take the burst and the one answer that overdraws the bucket: within 5% at 5 and 20 MB/s
    with answers as large as a whole fetch (4 MiB)."""
    cap = ByteRate(rate, now=0.0)
    taken = greedy(cap, size, 30.0)
    assert rate * 30 - size <= taken <= rate * 30 + rate * BURST_S + size
    assert abs(taken / 30 - rate) / rate < 0.05


def test_an_overdrawn_cap_waits_until_it_is_paid_back() -> None:
    cap = ByteRate(1 * MB, now=0.0)  # burst: 250 kB
    assert cap.wait_s(0.0) == 0
    cap.take(1_250_000, 0.0)  # one large answer: 1 MB overdrawn
    assert cap.wait_s(0.0) == pytest.approx(1.0)
    assert cap.wait_s(0.5) == pytest.approx(0.5)
    assert cap.wait_s(1.0) == 0
    # an idle stretch fills the bucket up to the burst only, not more
    assert cap.wait_s(100.0) == 0
    cap.take(300_000, 100.0)
    assert cap.wait_s(100.0) == pytest.approx(0.05)


def test_no_cap_never_waits_but_still_measures() -> None:
    cap = ByteRate(0, now=0.0)
    for second in range(10):
        cap.take(7 * MB, float(second))
        assert cap.wait_s(float(second)) == 0
    assert cap.rate(10.0) == pytest.approx(7 * MB)  # the last 5 s: 5 answers of 7 MB


def test_the_tightest_of_several_caps_holds() -> None:
    remote, process = ByteRate(1 * MB, 0.0), ByteRate(10 * MB, 0.0)
    for cap in (remote, process):
        cap.take(2 * MB, 0.0)
    assert wait_s((remote, process), 0.0) == pytest.approx(1.75)
    assert wait_s((), 0.0) == 0


def test_a_negative_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        ByteRate(-1, 0.0)


class Endless(Broker):
    """A remote with a backlog no fetch ever exhausts: every answer is 100 kB."""

    async def fetch(self, node, wants, **kwargs):  # type: ignore[no-untyped-def,override]
        answer = await super().fetch(node, {tp: (1, 0) for tp in wants}, **kwargs)
        for tp in answer:
            answer[tp] = type(answer[tp])(0, 10**9, 10**9, 0, (), b"r" * 100_000)
        return answer


async def fetched_in(seconds: float, caps: tuple[ByteRate, ...]) -> int:
    broker = Endless()
    broker.ends = {TP("t", p): 2 for p in range(4)}
    fetcher = Fetcher(broker, CopierConfig(), caps=caps)  # type: ignore[arg-type]
    fetcher.start()
    taken = 0

    async def copy(tp: TP) -> None:
        nonlocal taken
        while True:
            got = await fetcher.fetch(tp, 0)
            taken += len(got.records)

    tasks = [asyncio.create_task(copy(TP("t", p))) for p in range(4)]
    await asyncio.sleep(seconds)
    for task in tasks:
        task.cancel()
    await fetcher.stop()
    return taken


async def test_the_fetcher_holds_its_requests_while_a_cap_is_overdrawn() -> None:
    """Four partitions fetching as fast as they can, with a 1 MB/s cap: about 1 MB/s taken
    (give or take the burst and the two answers in flight), where without it the same loop
    takes many times that."""
    cap = ByteRate(1 * MB, time.monotonic())
    capped = await fetched_in(1.0, (cap,))
    assert 0.75 * MB <= capped <= 1 * MB + cap.burst + 2 * 4 * 100_000
    free = await fetched_in(1.0, (ByteRate(0, time.monotonic()),))
    assert free > 5 * capped


def test_the_remotes_table_shows_the_rate_and_its_cap() -> None:
    from syncer.tables import _rate

    assert _rate(4.93e6, 5e6) == "4.9 (5.0)"
    assert _rate(12e6, 0) == "12.0"
    assert _rate(None, None) == "-"


def test_a_capped_request_asks_for_about_a_burst() -> None:
    sizes = (4 * 1024 * 1024, 256 * 1024)  # fetch_max_bytes, partition_fetch_max_bytes
    assert request_bytes(*sizes, ()) == 4 * 1024 * 1024
    assert request_bytes(*sizes, (ByteRate(0, 0.0),)) == 4 * 1024 * 1024
    assert request_bytes(*sizes, (ByteRate(4 * MB, 0.0), ByteRate(0, 0.0))) == 1 * MB
    assert request_bytes(*sizes, (ByteRate(100 * MB, 0.0),)) == 4 * 1024 * 1024
    assert request_bytes(*sizes, (ByteRate(100_000, 0.0),)) == 256 * 1024  # one partition's


class Filling(Broker):
    """A remote that fills an answer like a broker: in the request's order, one partition's
    records only (as if ``max_bytes`` were spent on the first), the rest empty."""

    async def fetch(self, node, wants, **kwargs):  # type: ignore[no-untyped-def,override]
        self.requests.append((1, {tp: o for tp, (o, _) in wants.items()}, 0))
        answer = {}
        for i, tp in enumerate(wants):
            data = b"r" * 1000 if i == 0 else b""
            answer[tp] = FetchedPartition(0, 10**9, 10**9, 0, (), data)
        await asyncio.sleep(0.001)
        return answer


async def test_partitions_after_the_one_an_answer_filled_get_their_turn() -> None:
    """Every partition keeps several fetches queued (as a catching-up copier does); each
    answer carries only its first partition's records. The partition that brought records
    goes to the back, so none is starved (before: the first one took every answer)."""
    broker = Filling()
    fetcher = Fetcher(broker, CopierConfig())  # type: ignore[arg-type]
    fetcher.start()
    served: dict[TP, int] = {}

    async def copy(tp: TP) -> None:
        while True:
            got = await fetcher.fetch(tp, 0)
            served[tp] = served.get(tp, 0) + bool(got.records)

    tasks = [asyncio.create_task(copy(TP("t", p))) for p in range(4) for _ in range(3)]
    await asyncio.sleep(0.5)
    for task in tasks:
        task.cancel()
    await fetcher.stop()
    counts = [served.get(TP("t", p), 0) for p in range(4)]
    assert min(counts) > 0.5 * max(counts), counts
