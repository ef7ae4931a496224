"""A cluster of several KRaft nodes on loopback: each node a broker and a controller at once,
the nodes together a quorum of voters, every node with its own ports, directory, rack and JVM.

Production Kafka runs three or more brokers with replicated partitions, and a mirror's
hardest moments are theirs (a leader moving, a broker dying, a reassignment): this is where
tests meet them. A node is a ``RunningCluster`` that knows it is one member of several; what
the members share (the voters, the cluster id, the replication defaults) is decided here."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from syncer.testbed.errors import TestbedError
from syncer.testbed.jars import KafkaJars
from syncer.testbed.node import START_TIMEOUT_S, STOP_TIMEOUT_S, RunningCluster
from syncer.testbed.probe import broker_ids

# two 3-node clusters must fit a small machine next to the one-node clusters
NODE_HEAP = "384m"


def default_min_insync(replication_factor: int) -> int:
    """Kafka's usual choice: a write survives one replica down (2 of 3), and one replica is
    all there is to ask for below that."""
    return max(1, replication_factor - 1)


def quorum_voters(controller_ports: dict[int, int]) -> str:
    """``controller.quorum.voters`` for nodes ``{id: controller port}`` on loopback."""
    return ",".join(f"{node}@127.0.0.1:{port}" for node, port in sorted(controller_ports.items()))


def rack_of(node_id: int) -> str:
    """Racks r0, r1, r2, ...: one per node, so rack-aware placement and fetching from the
    nearest replica have something to choose between."""
    return f"r{node_id - 1}"


def replication_properties(
    nodes: int,
    replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
    auto_leader_rebalance: bool = False,
) -> dict[str, str]:
    """The broker settings a cluster of ``nodes`` gets for replication. With several nodes
    new topics are replicated to three (or all) nodes and need all but one in sync; Kafka's
    internal topics too. The controller's periodic preferred-leader election is off unless
    asked for, so that a test decides when leaders move; when on, it runs every 10 s (not
    Kafka's 300) so that it happens within a test."""
    if nodes < 1:
        raise TestbedError(f"a cluster needs at least one node, not {nodes}")
    rf = replication_factor if replication_factor is not None else min(nodes, 3)
    if not 1 <= rf <= nodes:
        raise TestbedError(f"replication factor {rf} does not fit a cluster of {nodes} node(s)")
    min_isr = min_insync_replicas if min_insync_replicas is not None else default_min_insync(rf)
    if not 1 <= min_isr <= rf:
        raise TestbedError(f"min.insync.replicas {min_isr} does not fit replication factor {rf}")
    props = {
        "default.replication.factor": str(rf),
        "min.insync.replicas": str(min_isr),
        "offsets.topic.replication.factor": str(rf),
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": str(min_isr),
        "share.coordinator.state.topic.replication.factor": str(rf),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        "auto.leader.rebalance.enable": "true" if auto_leader_rebalance else "false",
    }
    if auto_leader_rebalance:
        props["leader.imbalance.check.interval.seconds"] = "10"
    return props


@dataclass
class MultiNodeCluster:
    """A cluster of several nodes, as recorded in the state file. It answers what a
    one-node ``RunningCluster`` answers (bootstrap, running, start, stop, kill) for the
    cluster as a whole, and adds what only a cluster of several can do: one node at a time."""

    name: str
    members: list[RunningCluster]
    replication_factor: int
    min_insync_replicas: int

    def __post_init__(self) -> None:
        # read back from the state file as plain dicts
        self.members = [
            m if isinstance(m, RunningCluster) else RunningCluster(**m) for m in self.members
        ]

    @classmethod
    def from_state(cls, raw: dict[str, Any]) -> MultiNodeCluster:
        return cls(**raw)

    # what a one-node cluster answers -----------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """Every node: a client finds the cluster while any one of them is up."""
        return ",".join(m.bootstrap for m in self.members)

    @property
    def advertised(self) -> str:
        return self.bootstrap

    @property
    def direct(self) -> str:
        return ",".join(m.direct for m in self.members)

    @property
    def listen(self) -> str:
        return self.members[0].listen

    @property
    def directory(self) -> str:
        return str(Path(self.members[0].directory).parent)

    @property
    def log_path(self) -> Path:
        return self.members[0].log_path

    @property
    def pid(self) -> int | None:
        return self.members[0].pid

    def is_running(self) -> bool:
        """Every node runs (a cluster with a node down is not what ``up`` started)."""
        return all(m.is_running() for m in self.members)

    def start(self, jars: KafkaJars) -> None:
        """Format and launch every node that is not running, side by side: formatting
        alone is a JVM's start-up per node."""
        self._each(lambda m: m.start(jars))

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until every node answers and each one's metadata lists every broker: only then
        can a topic of replication factor ``len(members)`` be created."""
        deadline = time.monotonic() + timeout
        for member in self.members:
            member.wait_ready(max(1.0, deadline - time.monotonic()))
        for member in self.members:
            self._wait_sees_all(member, deadline)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM to every node at once. Stopped one after another, the last node's clean
        shutdown waited for a quorum that had already gone (seen: 30 s, then SIGKILL)."""
        self._each(lambda m: m.stop(timeout))

    def kill(self) -> None:
        self._each(RunningCluster.kill)

    def _each(self, action: Callable[[RunningCluster], None]) -> None:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(self.members)) as pool:
            for done in [pool.submit(action, m) for m in self.members]:
                done.result()

    # one node ------------------------------------------------------------------------------

    def node(self, node_id: int) -> RunningCluster:
        for member in self.members:
            if member.node_id == node_id:
                return member
        ids = ", ".join(str(m.node_id) for m in self.members)
        raise TestbedError(f"cluster {self.name!r} has no node {node_id} (nodes: {ids})")

    def start_node(self, node_id: int, jars: KafkaJars) -> None:
        """Launch one node (``wait_node`` waits until it serves)."""
        self.node(node_id).start(jars)

    def wait_node(self, node_id: int, timeout: float = START_TIMEOUT_S) -> None:
        """Until the node answers and sees every running node as a broker (itself
        registered and unfenced again): only then can it lead or follow."""
        member = self.node(node_id)
        deadline = time.monotonic() + timeout
        member.wait_ready(timeout)
        self._wait_sees_all(member, deadline)

    def _wait_sees_all(self, member: RunningCluster, deadline: float) -> None:
        want = {m.node_id for m in self.members if m.is_running()}
        seen: set[int] = set()
        while time.monotonic() < deadline:
            seen = broker_ids(member.direct, timeout=5.0)
            if want <= seen:
                return
            time.sleep(0.3)
        raise TestbedError(
            f"node {member.node_id} of {self.name!r} sees brokers {sorted(seen)}, not"
            f" {sorted(want)}; see {member.log_path}"
        )
