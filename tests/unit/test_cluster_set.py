"""One set of cluster connections per process: what is opened is closed, last first, whatever
fails part-way; ``status`` can go on without a remote that does not answer. The clusters'
own start and stop are stood in for (no broker); the set's bookkeeping is what is tested."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from syncer.clusters import Cluster, ClusterSet
from syncer.config import Config
from syncer.errors import AuthenticationError, UnreachableError

CONFIG = Config.from_dict(
    {
        "local": {"bootstrap_servers": "l:9092"},
        "remotes": [
            {"name": "east", "bootstrap_servers": "e:9092", "connections": 3},
            {"name": "west", "bootstrap_servers": "w:9092"},
        ],
        "topics": {"include": ["orders"]},
    }
)


class Brokers:
    """Stands in for Cluster.start/stop: which clients opened and closed, in order, and which
    fail to start (by ``name/lane``)."""

    def __init__(self) -> None:
        self.opened: list[str] = []
        self.closed: list[str] = []
        self.failing: dict[str, Exception] = {}

    async def start(self, cluster: Cluster) -> None:
        key = f"{cluster.name}/{cluster.lane}"
        await asyncio.sleep(0.01 * cluster.lane)  # lanes connect at once, end in any order
        if key in self.failing:
            raise self.failing[key]
        self.opened.append(key)

    async def stop(self, cluster: Cluster) -> None:
        self.closed.append(f"{cluster.name}/{cluster.lane}")


@pytest.fixture
def brokers(monkeypatch: pytest.MonkeyPatch) -> Iterator[Brokers]:
    fake = Brokers()
    monkeypatch.setattr(Cluster, "start", lambda cluster: fake.start(cluster))
    monkeypatch.setattr(Cluster, "stop", lambda cluster: fake.stop(cluster))
    yield fake


def unreachable(name: str) -> UnreachableError:
    return UnreachableError(f"remote cluster {name!r} at x:9092 is unreachable: refused")


async def test_every_lane_opens_and_closes_in_reverse_the_local_cluster_last(
    brokers: Brokers,
) -> None:
    async with ClusterSet(CONFIG) as clusters:
        assert [c.lane for c in clusters.lanes("east")] == [0, 1, 2]
        assert sorted(brokers.opened) == ["east/0", "east/1", "east/2", "local/0", "west/0"]
        assert brokers.opened[0] == "local/0"  # before any remote
        assert brokers.closed == []
    assert brokers.closed == ["west/0", "east/2", "east/1", "east/0", "local/0"]


async def test_a_remote_that_fails_the_start_closes_everything_already_open(
    brokers: Brokers,
) -> None:
    brokers.failing["west/0"] = unreachable("west")
    clusters = ClusterSet(CONFIG)
    with pytest.raises(UnreachableError, match="west"):
        await clusters.start()
    assert (
        sorted(brokers.closed)
        == sorted(brokers.opened)
        == [
            "east/0",
            "east/1",
            "east/2",
            "local/0",
        ]
    )
    assert list(clusters.remotes) == ["east", "west"]  # required: nothing is left out
    await clusters.stop()  # nothing more to close
    assert len(brokers.closed) == 4


async def test_a_lane_that_fails_closes_the_other_lanes_of_its_remote(brokers: Brokers) -> None:
    brokers.failing["east/2"] = unreachable("east")
    with pytest.raises(UnreachableError, match="east"):
        await ClusterSet(CONFIG).start()
    assert "east/0" in brokers.closed and "east/1" in brokers.closed
    assert sorted(brokers.closed) == sorted(brokers.opened)


async def test_not_required_an_unreachable_remote_is_left_out_with_its_error(
    brokers: Brokers,
) -> None:
    error = unreachable("east")
    brokers.failing["east/1"] = error
    clusters = ClusterSet(CONFIG)
    await clusters.start(required=False)
    assert list(clusters.remotes) == ["west"]
    assert clusters.unreachable == {"east": error}
    assert "east/0" in brokers.closed  # its lanes that did answer are not kept open
    assert clusters.open_connections().keys() == {"west"}
    await clusters.stop()
    assert sorted(brokers.closed) == sorted(brokers.opened)


async def test_a_remote_left_out_is_reached_later_and_taken_in_in_the_configs_order(
    brokers: Brokers,
) -> None:
    """``syncer run`` copies from the remotes that answer and tries the others again: a
    remote reached is connected on every lane but not among ``remotes`` until adopted,
    then sits where the configuration puts it (the order of trust), closed with the rest."""
    brokers.failing["east/0"] = unreachable("east")
    clusters = ClusterSet(CONFIG)
    await clusters.start(required=False)
    with pytest.raises(UnreachableError):  # still away
        await clusters.reach("east")
    del brokers.failing["east/0"]
    reached = await clusters.reach("east")
    assert [c.lane for c in reached.lanes] == [0, 1, 2]
    assert list(clusters.remotes) == ["west"] and list(clusters.unreachable) == ["east"]
    clusters.adopt(reached)
    assert list(clusters.remotes) == ["east", "west"] and clusters.unreachable == {}
    assert clusters.lanes("east") == reached.lanes
    assert clusters.open_connections().keys() == {"east", "west"}
    await clusters.stop()
    assert sorted(brokers.closed) == sorted(brokers.opened)
    assert brokers.closed[-1] == "local/0"


async def test_a_start_tried_again_tries_the_remotes_left_out_again(brokers: Brokers) -> None:
    """A start that left a remote out, then failed further on (the caller stopped it), and
    is tried again: the remote is asked again, not taken as gone for good."""
    brokers.failing = {"east/0": unreachable("east")}
    clusters = ClusterSet(CONFIG)
    await clusters.start(required=False)
    await clusters.stop()
    brokers.failing = {}
    await clusters.start(required=False)
    assert list(clusters.remotes) == ["east", "west"] and clusters.unreachable == {}
    assert [c.lane for c in clusters.lanes("east")] == [0, 1, 2]
    await clusters.stop()


async def test_not_required_still_fails_on_what_is_not_a_remote_being_down(
    brokers: Brokers,
) -> None:
    brokers.failing["west/0"] = AuthenticationError("remote cluster 'west': bad password")
    with pytest.raises(AuthenticationError):
        await ClusterSet(CONFIG).start(required=False)
    brokers.failing = {"local/0": UnreachableError("local cluster is unreachable")}
    with pytest.raises(UnreachableError, match="local"):
        await ClusterSet(CONFIG).start(required=False)


async def test_the_commands_that_read_ends_open_one_lane_of_the_remotes_named(
    brokers: Brokers,
) -> None:
    async with ClusterSet(CONFIG, remotes=["east"], lanes=False) as clusters:
        assert list(clusters.remotes) == ["east"]
        assert repr(clusters) == "<ClusterSet open [remotes: 1, lanes: 1, unreachable: 0]>"
    assert brokers.opened == ["local/0", "east/0"]
    assert repr(clusters) == "<ClusterSet closed [remotes: 1, lanes: 1, unreachable: 0]>"


async def test_start_and_stop_are_idempotent(brokers: Brokers) -> None:
    clusters = ClusterSet(CONFIG, lanes=False)
    await clusters.start()
    await clusters.start()
    assert len(brokers.opened) == 3
    await clusters.stop()
    await clusters.stop()
    assert len(brokers.closed) == 3


async def test_a_cluster_start_cancelled_mid_bootstrap_closes_its_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster(CONFIG.local, role="local")
    closed: list[bool] = []
    bootstrapping = asyncio.Event()

    async def bootstrap() -> None:
        bootstrapping.set()
        await asyncio.Event().wait()  # a broker that never answers

    async def close() -> None:
        closed.append(True)

    monkeypatch.setattr(cluster._client, "bootstrap", bootstrap)
    monkeypatch.setattr(cluster._client, "close", close)
    starting = asyncio.create_task(cluster.start())
    await bootstrapping.wait()
    starting.cancel()  # e.g. Ctrl-C while a remote is slow to answer
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert closed == [True]
    await cluster.stop()  # never started: nothing more to close
    assert closed == [True]
