"""Start, find and stop single-node KRaft clusters on loopback: the bed as a whole, recorded
in one state file (``DIR/testbed.json``) so that another process can find it again. One
cluster's settings and JVM are ``node``."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from syncer.testbed.errors import TestbedError
from syncer.testbed.jars import KafkaJars
from syncer.testbed.node import RunningCluster, log4j_properties

# RunningCluster and log4j_properties lived here first; tests and benchmarks import them here
__all__ = [
    "STATE_FILE",
    "ClusterSpec",
    "RunningCluster",
    "Testbed",
    "free_port",
    "log4j_properties",
]

STATE_FILE = "testbed.json"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class ClusterSpec:
    """What to start: a name, optional fixed ports, and an address to advertise instead of
    the listening one (so a proxy can stand in front of the broker)."""

    name: str
    port: int | None = None
    controller_port: int | None = None
    advertised: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    # the clients' listener: PLAINTEXT, SSL (mutual TLS), SASL_PLAINTEXT or SASL_SSL (SCRAM)
    security: str = "PLAINTEXT"
    scram_users: Mapping[str, str] = field(default_factory=dict)  # name → password
    authorizer: bool = False  # ACLs enforced (everything allowed where a topic has none)


class Testbed:
    """A set of clusters under one state directory (``DIR/testbed.json``)."""

    __test__ = False  # not a pytest test class

    def __init__(self, state_dir: Path | str, jars: KafkaJars | None = None) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.jars = jars or KafkaJars.default()
        self.clusters: dict[str, RunningCluster] = {}

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
        bed.clusters = {c["name"]: RunningCluster(**c) for c in raw["clusters"]}
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

    def up(self, specs: Iterable[ClusterSpec]) -> list[RunningCluster]:
        """Start the named clusters (all at once) and wait until each answers."""
        self.jars.ensure()
        started = []
        for spec in specs:
            cluster = self._place(spec)
            self.clusters[spec.name] = cluster
            cluster.start(self.jars)
            started.append(cluster)
            self.save()
        try:
            for cluster in started:
                cluster.wait_ready()
        except TestbedError:
            self.down()
            raise
        return started

    def down(self) -> None:
        for cluster in self.clusters.values():
            cluster.stop()
        if self.clusters:
            self.save()

    def restart(self, name: str, *, crash: bool = False) -> None:
        cluster = self.clusters[name]
        if crash:
            cluster.kill()
        else:
            cluster.stop()
        cluster.start(self.jars)
        self.save()
        cluster.wait_ready()

    def _place(self, spec: ClusterSpec) -> RunningCluster:
        if spec.name in self.clusters:
            known = self.clusters[spec.name]
            if known.is_running():
                raise TestbedError(f"cluster {spec.name!r} is already running at {known.listen}")
        port = spec.port or free_port()
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
        )
