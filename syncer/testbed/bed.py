"""Start, find and stop KRaft clusters on loopback: the bed as a whole, recorded in one state
file (``DIR/testbed.json``) so that another process can find it again. A one-node cluster's
settings and JVM are ``node``; a cluster of several nodes is ``quorum``."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeAlias

from syncer.testbed import cds, tools
from syncer.testbed.errors import TestbedError
from syncer.testbed.jars import KafkaJars
from syncer.testbed.node import (
    ZOOKEEPER,
    ZOOKEEPER_SESSION_S,
    RunningCluster,
    cluster_mode,
    log4j_properties,
)
from syncer.testbed.process import random_cluster_id
from syncer.testbed.quorum import (
    NODE_HEAP,
    MultiNodeCluster,
    quorum_voters,
    rack_of,
    replication_properties,
)

# RunningCluster and log4j_properties lived here first; tests and benchmarks import them here
__all__ = [
    "STATE_FILE",
    "AnyCluster",
    "ClusterSpec",
    "RunningCluster",
    "Testbed",
    "free_port",
    "log4j_properties",
]

STATE_FILE = "testbed.json"

AnyCluster: TypeAlias = RunningCluster | MultiNodeCluster


# every port ``free_port`` handed out in this process
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on now, and never one this process handed out
    before: the kernel may give the same free port to two binds in a row, and two nodes of
    one cluster were once configured with the same port (the second failed to start)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def _train(jars: KafkaJars, directory: Path, dump: Path) -> None:
    """A one-node broker in ``directory`` whose JVM writes its class-data archive to
    ``dump`` as it exits: started, waited for until it answers, stopped cleanly."""
    port = free_port()
    broker = RunningCluster(
        name="cds-training",
        port=port,
        controller_port=free_port(),
        advertised=f"127.0.0.1:{port}",
        directory=str(directory),
        jvm_options=[f"-XX:ArchiveClassesAtExit={dump}"],
    )
    try:
        broker.start(jars)
        broker.wait_ready()
    finally:
        broker.stop()


@dataclass(frozen=True)
class ClusterSpec:
    """What to start: a name, optional fixed ports, and an address to advertise instead of
    the listening one (so a proxy can stand in front of the broker). With ``nodes`` > 1, a
    cluster of that many nodes (``quorum``) on consecutive ports from ``port`` if given,
    replicated as ``replication_factor``/``min_insync_replicas`` say (default 3 or all nodes,
    and one fewer in sync); ``auto_leader_rebalance`` turns the controller's periodic
    preferred-leader election on. A proxy in front or a secured listener is for one node.
    ``version``: another Apache Kafka version than the bed's (None: the bed's, 4.1.1), one
    node. ``mode``: where it keeps its metadata, ``"zookeeper"`` (a ZooKeeper of its own,
    PLAINTEXT) or ``"kraft"``; None chooses ZooKeeper before 4.0 and KRaft from 4.0
    (``node.cluster_mode``; KRaft before 3.3 or ZooKeeper from 4.0 is refused)."""

    name: str
    port: int | None = None
    controller_port: int | None = None
    advertised: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    # the clients' listener: PLAINTEXT, SSL (mutual TLS), SASL_PLAINTEXT or SASL_SSL (SCRAM)
    security: str = "PLAINTEXT"
    scram_users: Mapping[str, str] = field(default_factory=dict)  # name → password
    authorizer: bool = False  # ACLs enforced (everything allowed where a topic has none)
    nodes: int = 1
    replication_factor: int | None = None
    min_insync_replicas: int | None = None
    auto_leader_rebalance: bool = False
    version: str | None = None
    mode: str | None = None


class Testbed:
    """A set of clusters under one state directory (``DIR/testbed.json``)."""

    __test__ = False  # not a pytest test class

    def __init__(self, state_dir: Path | str, jars: KafkaJars | None = None) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.jars = jars or KafkaJars.default()
        self.clusters: dict[str, AnyCluster] = {}

    def __repr__(self) -> str:
        running = sum(c.is_running() for c in self.clusters.values())
        return f"<Testbed {self.state_dir} [{running}/{len(self.clusters)} running]>"

    @property
    def state_path(self) -> Path:
        return self.state_dir / STATE_FILE

    @classmethod
    def load(cls, state_dir: Path | str) -> Testbed:
        bed = cls(state_dir)
        if not bed.state_path.exists():
            raise TestbedError(f"no test bed state at {bed.state_path}")
        raw = json.loads(bed.state_path.read_text())
        bed.jars = KafkaJars(Path(raw["cache_dir"]), raw["kafka_version"])
        bed.clusters = {c["name"]: _from_state(c) for c in raw["clusters"]}
        return bed

    @classmethod
    def open(cls, state_dir: Path | str) -> Testbed:
        """The bed recorded under ``state_dir``, or a new empty one there."""
        if (Path(state_dir) / STATE_FILE).exists():
            return cls.load(state_dir)
        return cls(state_dir)

    def save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        raw = {
            "kafka_version": self.jars.version,
            "cache_dir": str(self.jars.cache_dir),
            "clusters": [asdict(c) for c in self.clusters.values()],
        }
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(raw, indent=2) + "\n")
        tmp.replace(self.state_path)

    def up(self, specs: Iterable[ClusterSpec]) -> list[AnyCluster]:
        """Start the named clusters (all at once) and wait until each answers."""
        started: list[AnyCluster] = []
        for spec in specs:
            cluster = self._place(spec)
            self.clusters[spec.name] = cluster
            cluster.start(self.jars_of(cluster))
            started.append(cluster)
            self.save()
        try:
            for cluster in started:
                cluster.wait_ready()
        except TestbedError:
            self.down()
            raise
        return started

    def down(self, *, kill: bool = False) -> None:
        """Stop every cluster: cleanly, or with ``kill`` SIGKILL to the brokers first (a test's
        throw-away clusters: a 3-node cluster's clean shutdown takes up to 17 s)."""
        for cluster in self.clusters.values():
            if kill:
                cluster.kill()
            cluster.stop()  # what kill left: a ZooKeeper-mode broker's ZooKeeper
        if self.clusters:
            self.save()

    def restart(self, name: str, *, crash: bool = False) -> None:
        cluster = self.clusters[name]
        if crash:
            cluster.kill()
            if getattr(cluster, "zookeeper_port", None) is not None:
                # its registration in ZooKeeper outlives it until the session expires
                time.sleep(ZOOKEEPER_SESSION_S + 1)
        else:
            cluster.stop()
        cluster.start(self.jars_of(cluster))
        self.save()
        cluster.wait_ready()

    def jars_of(self, cluster: AnyCluster) -> KafkaJars:
        """The jars ``cluster`` runs on (its own version's, or the bed's), fetched if new,
        with their class-data archive trained on first use (``cds``)."""
        version = getattr(cluster, "version", None)
        jars = KafkaJars(self.jars.cache_dir, version) if version else self.jars
        jars.ensure()
        cds.ensure(jars, lambda directory, dump: _train(jars, directory, dump))
        return jars

    # one node, one partition -------------------------------------------------------------

    def multi(self, name: str) -> MultiNodeCluster:
        """The cluster ``name``, which must have several nodes."""
        cluster = self.clusters.get(name)
        if cluster is None:
            raise TestbedError(f"no cluster {name!r} in {self.state_path}")
        if not isinstance(cluster, MultiNodeCluster):
            raise TestbedError(f"cluster {name!r} has one node: stop or start it whole")
        return cluster

    def stop_node(self, name: str, node_id: int) -> None:
        """A clean shutdown of one node: it hands its leaderships over first."""
        self.multi(name).node(node_id).stop()
        self.save()

    def kill_node(self, name: str, node_id: int) -> None:
        """kill -9 of one node: its leaderships move once the controller fences it."""
        self.multi(name).node(node_id).kill()
        self.save()

    def start_node(self, name: str, node_id: int) -> None:
        cluster = self.multi(name)
        cluster.start_node(node_id, self.jars)
        self.save()
        cluster.wait_node(node_id)

    def elect_preferred(self, name: str, partitions: Iterable[tuple[str, int]]) -> str:
        """A preferred leader election (Kafka's kafka-leader-election) for ``partitions``."""
        return tools.elect_preferred_leaders(self.clusters[name].direct, partitions, jars=self.jars)

    def reassign(self, name: str, moves: Mapping[tuple[str, int], Sequence[int]]) -> None:
        """Move partitions to new replicas (Kafka's kafka-reassign-partitions) and wait
        until the moves are complete."""
        tools.reassign_partitions(self.clusters[name].direct, moves, jars=self.jars)

    def _place(self, spec: ClusterSpec) -> AnyCluster:
        if spec.name in self.clusters:
            known = self.clusters[spec.name]
            if known.is_running():
                raise TestbedError(f"cluster {spec.name!r} is already running at {known.listen}")
        try:
            mode = cluster_mode(spec.version, spec.mode)
        except TestbedError as exc:
            raise TestbedError(f"cluster {spec.name!r}: {exc}") from None
        if spec.nodes > 1:
            if spec.version is not None:
                raise TestbedError(f"cluster {spec.name!r}: another Kafka version needs nodes=1")
            return self._place_several(spec)
        port = spec.port or free_port()
        if mode == ZOOKEEPER:
            if spec.advertised or spec.security != "PLAINTEXT" or spec.authorizer:
                raise TestbedError(
                    f"cluster {spec.name!r}: Kafka {spec.version} in ZooKeeper mode is"
                    " PLAINTEXT, with no proxy in front"
                )
            return RunningCluster(
                name=spec.name,
                port=port,
                controller_port=0,  # no controller listener: the controller is elected in ZK
                advertised=f"127.0.0.1:{port}",
                directory=str(self.state_dir / spec.name),
                properties=dict(spec.properties),
                version=spec.version,
                mode=ZOOKEEPER,
                zookeeper_port=spec.controller_port or free_port(),
            )
        return RunningCluster(
            name=spec.name,
            port=port,
            controller_port=spec.controller_port or free_port(),
            advertised=spec.advertised or f"127.0.0.1:{port}",
            directory=str(self.state_dir / spec.name),
            properties=dict(spec.properties),
            direct_port=free_port() if spec.advertised or spec.security != "PLAINTEXT" else None,
            security=spec.security,
            scram_users=dict(spec.scram_users),
            authorizer=spec.authorizer,
            version=spec.version,
        )

    def _place_several(self, spec: ClusterSpec) -> MultiNodeCluster:
        if spec.advertised or spec.security != "PLAINTEXT" or spec.scram_users:
            raise TestbedError(
                f"cluster {spec.name!r}: a proxy in front or a secured listener needs nodes=1"
            )
        ids = range(1, spec.nodes + 1)
        ports = {i: spec.port + i - 1 if spec.port else free_port() for i in ids}
        controllers = {
            i: spec.controller_port + i - 1 if spec.controller_port else free_port() for i in ids
        }
        props = replication_properties(
            spec.nodes,
            spec.replication_factor,
            spec.min_insync_replicas,
            spec.auto_leader_rebalance,
        )
        props.update(spec.properties)
        cluster_id = random_cluster_id()
        members = [
            RunningCluster(
                name=f"{spec.name}/{i}",
                port=ports[i],
                controller_port=controllers[i],
                advertised=f"127.0.0.1:{ports[i]}",
                directory=str(self.state_dir / spec.name / f"node{i}"),
                properties=dict(props),
                authorizer=spec.authorizer,
                node_id=i,
                voters=quorum_voters(controllers),
                rack=rack_of(i),
                cluster_id=cluster_id,
                heap=NODE_HEAP,
            )
            for i in ids
        ]
        return MultiNodeCluster(
            spec.name,
            members,
            int(props["default.replication.factor"]),
            int(props["min.insync.replicas"]),
        )


def _from_state(raw: dict[str, object]) -> AnyCluster:
    """A cluster as the state file records it: several nodes, or one."""
    if "members" in raw:
        return MultiNodeCluster.from_state(raw)
    return RunningCluster(**raw)  # type: ignore[arg-type]
