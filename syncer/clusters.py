"""One object per cluster over aiokafka, and the names the rest of syncer uses from the
cluster layer. ``Cluster`` is put together from what each part owns:

- ``syncer.connection``: start and stop, bootstrap, metadata, topic ids, leaders, sending a
  request or opening a connection ahead of one (socket tuning), and the mapping of Kafka
  errors to ours; ``syncer.client_security``: client options (TLS contexts built once per
  cluster);
- ``syncer.wire``: the raw requests of the data path (list offsets, fetch, produce,
  InitProducerId) and their answers;
- ``syncer.admin``: topics, broker settings, consumer groups and deleting records.

Error codes leave as our errors (``error_for``) or named constants. Outside this layer (these
modules and ``protocol``) aiokafka is used only for what it does whole: its producer and
consumer (``identity``), its group membership (``coordination``), its record-batch codec
(``batches``), and in the test bed.

``ClusterSet`` is every connection of one process (local, each remote, each remote's extra
lanes), opened and closed together; ``Syncer`` and the ``plan``, ``status`` and ``verify``
commands all connect through it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Collection, Iterable, Mapping
from typing import Self, TypeVar

from syncer.admin import TopicAdmin
from syncer.cluster_ids import same_cluster, shares_a_topic
from syncer.config import Config
from syncer.connection import TP, client_options, error_for, is_retriable
from syncer.errors import ConfigError, SyncerError, UnreachableError
from syncer.wire import (
    EARLIEST,
    LATEST,
    OFFSET_OUT_OF_RANGE,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchedPartition,
    ProduceResult,
    WireRequests,
)

__all__ = [
    "EARLIEST",
    "LATEST",
    "OFFSET_OUT_OF_RANGE",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "TP",
    "Cluster",
    "ClusterSet",
    "FetchedPartition",
    "ProduceResult",
    "client_options",
    "error_for",
    "is_retriable",
]

V = TypeVar("V")
log = logging.getLogger(__name__)


class Cluster(WireRequests, TopicAdmin):
    """A connection to one cluster, with its requests and admin calls.
    ``async with Cluster(cfg, role="local") as cluster: ...``"""


async def _ids(cluster: Cluster) -> dict[str, uuid.UUID] | None:
    """Every topic's id on ``cluster``; None if it tells none or does not answer."""
    try:
        return (await cluster.topic_census()).ids
    except SyncerError:
        return None


def in_order(by_name: dict[str, V], order: Iterable[str]) -> None:
    """Reorder ``by_name`` in place: its keys in ``order``'s order."""
    ordered = {name: by_name[name] for name in order if name in by_name}
    by_name.clear()
    by_name.update(ordered)


@dataclasses.dataclass(frozen=True)
class Reached:
    """A remote left out at the start, now connected (``ClusterSet.reach``)."""

    remote: str
    lanes: list[Cluster]
    opened: contextlib.AsyncExitStack


class ClusterSet:
    """Every cluster connection of one process: the local cluster, each remote, and each
    remote's extra lanes (more clients of it, each with its own TCP connections). Opened
    through one ``AsyncExitStack``, so a failure part-way closes what was opened, and closed
    in reverse (the local cluster last). ``async with ClusterSet(config) as clusters: ...``

    ``remotes`` (the config's, or only the ones named) are the remotes in use, and only this
    object changes it: ``start(required=False)`` leaves out a remote that does not answer,
    keeping its error in ``unreachable`` (``status`` shows the remotes that answer; ``syncer
    run`` copies from them), until ``reach`` and ``adopt`` bring it in. With ``lanes=False``
    a remote has one lane (for the commands that only read ends)."""

    def __init__(
        self,
        config: Config,
        *,
        remotes: Collection[str] | None = None,
        lanes: bool = True,
    ) -> None:
        self._chosen = {r.name: r for r in config.remotes if remotes is None or r.name in remotes}
        self._lanes_on = lanes
        self.local = Cluster(config.local, role="local")
        self.remotes: dict[str, Cluster] = {}
        self.extra_lanes: dict[str, list[Cluster]] = {}  # remote → its lanes beyond the first
        for name in self._chosen:
            self.remotes[name], *self.extra_lanes[name] = self._clients(name)
        self.unreachable: dict[str, UnreachableError] = {}  # ``start(required=False)``
        self._stack: contextlib.AsyncExitStack | None = None
        self._local_id: str | None = None  # the local cluster's id, once read ("": untold)

    def __repr__(self) -> str:
        lanes = sum(len(self.lanes(name)) for name in self.remotes)
        state = "open" if self._stack is not None else "closed"
        return (
            f"<ClusterSet {state} [remotes: {len(self.remotes)}, lanes: {lanes},"
            f" unreachable: {len(self.unreachable)}]>"
        )

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _clients(self, remote: str) -> list[Cluster]:
        """A client per lane of ``remote``, not connected yet."""
        config = self._chosen[remote]
        count = config.connections if self._lanes_on else 1
        return [Cluster(config, role="remote", lane=i) for i in range(count)]

    def lanes(self, remote: str) -> list[Cluster]:
        """The clients of ``remote``: its first lane, then the extra ones."""
        return [self.remotes[remote], *self.extra_lanes[remote]]

    async def start(self, *, required: bool = True) -> None:
        """Connect the local cluster, then every lane of every remote at once (over a long
        link, one after another adds up); idempotent. With ``required=False`` a remote that
        is unreachable is left out (``unreachable``) instead of failing the start."""
        if self._stack is not None:
            return
        for name in list(self.unreachable):  # a start tried again tries them all again
            self._take_in(name, self._clients(name))
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(self.local)
            names = list(self.remotes)
            opened = await asyncio.gather(
                *(self._open(self.lanes(name)) for name in names), return_exceptions=True
            )
            for result in opened:  # closed with the rest should a remote fail the start
                if isinstance(result, contextlib.AsyncExitStack):
                    await stack.enter_async_context(result)
            for name, result in zip(names, opened, strict=True):
                if isinstance(result, UnreachableError) and not required:
                    self.unreachable[name] = result
                    del self.remotes[name], self.extra_lanes[name]
                elif isinstance(result, BaseException):
                    raise result
            await self._refuse_the_local_cluster(dict(self.remotes))
            self._stack = stack.pop_all()

    async def _refuse_the_local_cluster(self, remotes: Mapping[str, Cluster]) -> None:
        """Raise ``ConfigError`` if one of ``remotes`` is the local cluster under another
        address (the config's check compares addresses only): the same cluster id, and a
        topic of the same id (``check.same_cluster_line``). Where the brokers tell no id
        (before Kafka 2.8), or do not answer, nothing is told. The remotes are asked side by
        side: a broker that does not answer costs one request timeout, not one per remote."""
        if self._local_id is None:
            self._local_id = await self.local.cluster_id() or ""
        if not self._local_id or not remotes:
            return
        names = list(remotes)
        told = await asyncio.gather(*(remotes[name].cluster_id() for name in names))
        for name, remote_id in zip(names, told, strict=True):
            if remote_id != self._local_id:
                continue
            shared = shares_a_topic(await _ids(self.local), await _ids(remotes[name]))
            same = same_cluster(self._local_id, remote_id, shared)
            if same is not None and same.certain:
                raise ConfigError(
                    [f"remotes[{name}].bootstrap_servers: {same.detail}"],
                    source="config",
                )
            if same is not None:
                log.warning("remote %s %s", name, same.detail)

    async def reach(self, remote: str) -> Reached:
        """Connect every lane of ``remote``, left out by the start, without bringing it in
        (``adopt`` does: the remotes change only where their users expect it). Raises as
        the start does (``UnreachableError``, ``AuthenticationError`` ...)."""
        assert remote in self.unreachable, f"{remote} was not left out"
        lanes = self._clients(remote)
        opened = await self._open(lanes)
        try:
            await self._refuse_the_local_cluster({remote: lanes[0]})
        except BaseException:
            await opened.aclose()
            raise
        return Reached(remote, lanes, opened)

    def adopt(self, reached: Reached) -> None:
        """Bring a remote ``reach`` connected in among ``remotes``; closed with the rest."""
        assert self._stack is not None, "adopted after the stop"
        self._stack.push_async_callback(reached.opened.aclose)
        self._take_in(reached.remote, reached.lanes)

    def _take_in(self, remote: str, lanes: list[Cluster]) -> None:
        """``remote`` among ``remotes`` again, in the configuration's order (the order of
        trust: settings and group offsets follow the first remote holding them). In place:
        the topic planner, the settings syncer and the offsets copier hold these dicts."""
        self.unreachable.pop(remote, None)
        self.remotes[remote], *self.extra_lanes[remote] = lanes
        in_order(self.remotes, self._chosen)
        in_order(self.extra_lanes, self._chosen)

    async def _open(self, lanes: list[Cluster]) -> contextlib.AsyncExitStack:
        """Connect every lane of a remote; all of them or none stay open."""
        async with contextlib.AsyncExitStack() as stack:
            results = await asyncio.gather(
                *(stack.enter_async_context(lane) for lane in lanes), return_exceptions=True
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result
            return stack.pop_all()

    async def stop(self) -> None:
        """Close every connection, the last opened first; idempotent."""
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    def fetched_bytes(self) -> dict[str, dict[int, int]]:
        """Per remote, the record bytes each of its brokers (node id) served us, over all its
        lanes: with ``client_rack``, how much came from the nearby follower."""
        out: dict[str, dict[int, int]] = {}
        for name in self.remotes:
            by_node = out.setdefault(name, {})
            for lane in self.lanes(name):
                for node, size in lane.fetched_bytes.items():
                    by_node[node] = by_node.get(node, 0) + size
        return out

    def open_connections(self) -> dict[str, int]:
        """Open TCP connections per remote, over all its lanes."""
        return {
            name: sum(lane.open_connections() for lane in self.lanes(name)) for name in self.remotes
        }
