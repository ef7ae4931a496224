"""A randomized fault run: several ``syncer run`` processes in one group copy a partitioned
topic that a producer keeps writing, while rounds of faults hit them at random moments: kill
-9 and restart, pause (SIGSTOP for up to a few seconds, past the write lease), a cut of every
connection to the local or the remote cluster (produce requests in flight lose their answers),
and an outage of either link for a few seconds (connections refused). Both clusters sit behind
a proxy for this, on a bed of their own. At the end every local partition must equal the
remote's offset by offset: nothing lost, nothing duplicated.

The local broker forgets a producer 5 s after the newest timestamp it wrote
(``producer.id.expiration.ms``), and the run is made twice: with records stamped now, and
with records two days old, as a migration copies them — then the broker holds no producer
state for us most of the time, and no duplicate fence with it.

CI runs a few rounds (``SYNCER_CHAOS_ROUNDS``, default 6); ``make chaos`` runs 60. The seed
is printed so that a failing run can be replayed (``SYNCER_CHAOS_SEED``). The same kind of run
with broker faults (kill -9 and restarts of nodes, preferred elections) on 3-node clusters is
``test_chaos_brokers``; ``make chaos`` runs both."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from syncer.status import State
from syncer.syncer import Syncer
from syncer.testbed import ClusterSpec, Testbed
from syncer.testbed.bed import free_port
from syncer.testbed.proxy import LinkProxy
from tests.integration.test_config_sync import eventually
from tests.kafka_helpers import Daemon, create_topic, make_config, own_bed, produce, read_partition

PARTITIONS = 6
DAEMONS = 3
SIDES = ("local", "remote")
DAY_MS = 86_400_000
SHORT_MEMORY = {
    "producer.id.expiration.ms": "5000",
    "producer.id.expiration.check.interval.ms": "1000",
}


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory, testbed: Testbed) -> Iterator[Testbed]:
    """A local and a remote cluster that advertise a proxy's address (the daemons' links)."""
    specs = [
        ClusterSpec(
            f"chaos_{side}",
            advertised=f"127.0.0.1:{free_port()}",
            properties=SHORT_MEMORY if side == "local" else {},
        )
        for side in SIDES
    ]
    with own_bed(tmp_path_factory.mktemp("chaos"), testbed.jars, specs) as bed:
        yield bed


@pytest.fixture
async def links(proxied: Testbed) -> AsyncIterator[dict[str, LinkProxy]]:
    proxies = {side: LinkProxy.in_front_of(proxied.clusters[f"chaos_{side}"]) for side in SIDES}
    for proxy in proxies.values():
        await proxy.start()
    try:
        yield proxies
    finally:
        for proxy in proxies.values():
            await proxy.stop()


async def keep_producing(
    bootstrap: str, topic: str, stop: asyncio.Event, age_ms: int, **settings: Any
) -> int:
    """Small batches into every partition until ``stop``, stamped ``age_ms`` in the past;
    how many records were written. ``settings`` go to the producer (a remote whose brokers
    die wants an idempotent one, or its retries write records twice at the source)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, **{"linger_ms": 5, "acks": "all", **settings}
    )
    await producer.start()
    sent = 0
    try:
        while not stop.is_set():
            stamp = int(time.time() * 1000) - age_ms
            futures = [
                await producer.send(
                    topic,
                    b"%d-%d" % (p, sent + i),
                    key=b"k%d" % i,
                    partition=p,
                    timestamp_ms=stamp,
                )
                for i in range(20)
                for p in range(PARTITIONS)
            ]
            await asyncio.gather(*futures)
            sent += len(futures)
            await asyncio.sleep(0.02)
    finally:
        await producer.stop()
    return sent


def start(tmp_path: Path, index: int, raw: dict[str, object]) -> Daemon:
    directory = tmp_path / f"member-{index}-{time.monotonic_ns()}"
    directory.mkdir()
    return Daemon(directory, raw)


def chaos_config(topic: str, local: str, remote: str) -> dict[str, object]:
    """The members' config: short timeouts, a 6 s session and a 3 s write lease, so that
    kills and pauses move partitions within a round."""
    return {
        "name": f"chaos-{topic}",
        "local": {"bootstrap_servers": local, "request_timeout_ms": 5000},
        "remotes": [{"name": "east", "bootstrap_servers": remote, "request_timeout_ms": 5000}],
        "topics": {"include": [topic], "refresh_interval_s": 1},
        "coordination": {
            "group": f"chaos-{topic}",
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 500,
            "lease_ms": 3000,
        },
        "copier": {"shutdown_timeout_s": 5},
    }


@pytest.mark.parametrize("age_ms", [0, 2 * DAY_MS], ids=["records-now", "records-2-days-old"])
async def test_random_kills_pauses_and_cut_links_lose_and_duplicate_nothing(
    proxied: Testbed, links: dict[str, LinkProxy], topic: str, tmp_path: Path, age_ms: int
) -> None:
    local = proxied.clusters["chaos_local"]
    east = proxied.clusters["chaos_remote"]
    rounds = int(os.environ.get("SYNCER_CHAOS_ROUNDS", "6"))
    seed = int(os.environ.get("SYNCER_CHAOS_SEED", str(random.randrange(1 << 30))))
    print(f"chaos: {rounds} rounds, seed {seed}")
    rng = random.Random(seed)
    await create_topic(east.direct, topic, PARTITIONS)
    raw = chaos_config(topic, local.bootstrap, east.bootstrap)
    members = [start(tmp_path, i, raw) for i in range(DAEMONS)]
    stop = asyncio.Event()
    producing = asyncio.create_task(keep_producing(east.direct, topic, stop, age_ms))
    actions: list[str] = []
    try:
        for _ in range(rounds):
            await asyncio.sleep(rng.uniform(0.5, 3.0))
            i = rng.randrange(DAEMONS)
            victim = members[i]
            fault = rng.random()
            if fault < 0.3:
                side = rng.choice(SIDES)
                if fault < 0.15:
                    await links[side].cut()  # requests in flight lose their answers
                    actions.append(f"cut {side}")
                else:
                    outage = rng.uniform(0.5, 4.0)
                    await links[side].stop()  # and connections are refused for a while
                    await asyncio.sleep(outage)
                    await links[side].start()
                    actions.append(f"outage {side} {outage:.1f}s")
            elif fault < 0.65:
                victim.proc.send_signal(signal.SIGKILL)  # a crash mid-write
                await asyncio.to_thread(victim.proc.wait, 10)
                await asyncio.sleep(rng.uniform(0.0, 2.0))
                members[i] = start(tmp_path, i, raw)
                actions.append(f"kill {i}")
            else:
                pause = rng.uniform(0.5, 5.0)  # past the 3 s lease: a zombie that wakes up
                victim.proc.send_signal(signal.SIGSTOP)
                await asyncio.sleep(pause)
                victim.proc.send_signal(signal.SIGCONT)
                actions.append(f"pause {i} {pause:.1f}s")
        stop.set()
        sent = await producing
        print(f"chaos: {sent} records written during {', '.join(actions)}")
        remote = [await read_partition(east.direct, topic, p) for p in range(PARTITIONS)]
        deadline = time.monotonic() + 120
        while True:
            ends = [len(await read_partition(local.direct, topic, p)) for p in range(PARTITIONS)]
            if ends == [len(r) for r in remote] or time.monotonic() > deadline:
                break
            await asyncio.sleep(1)
        for p in range(PARTITIONS):
            copied = await read_partition(local.direct, topic, p)
            assert len(copied) == len(remote[p]), f"partition {p}, seed {seed}, {actions}"
            assert copied == remote[p], f"partition {p} differs, seed {seed}, {actions}"
        assert sum(len(r) for r in remote) == sent
    finally:
        stop.set()
        for member in members:
            if member.proc.poll() is None:
                member.proc.send_signal(signal.SIGCONT)
        # in threads: the proxies run on this loop, and a stopping daemon drains through them
        await asyncio.gather(*(asyncio.to_thread(member.stop) for member in members))
        await asyncio.gather(producing, return_exceptions=True)


async def test_the_local_link_lost_as_the_first_refresh_creates_topics_is_waited_out(
    proxied: Testbed, links: dict[str, LinkProxy], topic: str
) -> None:
    """The chaos run's first fault, an outage of the local link, once came as the members
    created their topic: one exited ("creating topics failed"), one died of an unwrapped
    NodeNotReadyError, the third waited 30 s for its next refresh, and nothing was copied.
    Once started, a daemon waits out a cluster that is away, and tries again soon."""
    local, remote = proxied.clusters["chaos_local"], proxied.clusters["chaos_remote"]
    await create_topic(remote.direct, topic)
    await produce(remote.direct, topic, [(b"k", b"%d" % i) for i in range(50)])
    syncer = Syncer(make_config(local.bootstrap, {"east": remote.bootstrap}, [topic]))
    async with syncer:  # started: the local cluster gave our producer id and its settings
        await links["local"].stop()  # then it is away as the first refresh creates the topic
        run = asyncio.create_task(syncer.run())
        try:
            await asyncio.sleep(3)
            assert not run.done(), run  # not ended by it: waiting it out
            await links["local"].start()
            took = await eventually(
                lambda: (
                    [(s.state, s.local_end) for s in syncer.statuses()] == [(State.CAUGHT_UP, 50)]
                ),
                "the copy after the outage",
                timeout=20,
            )
        finally:
            syncer.request_stop()
            await asyncio.wait_for(run, 30)
    assert took < 20
    assert await read_partition(local.direct, topic) == await read_partition(remote.direct, topic)
