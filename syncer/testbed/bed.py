"""Start, find and stop single-node KRaft clusters on loopback."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from syncer.testbed.errors import TestbedError
from syncer.testbed.jars import KafkaJars
from syncer.testbed.probe import probe_metadata
from syncer.testbed.tls import Certificates, make_certificates

log = logging.getLogger(__name__)

STATE_FILE = "testbed.json"
HEAP = "512m"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0


def log4j_properties(level: str = "INFO") -> str:
    """A log4j2 configuration for the bed's JVMs: one line per event on standard output."""
    return f"""status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
logger.kafka_request.name = kafka.request.logger
logger.kafka_request.level = WARN
"""


# JVMs this process started, kept so they are reaped (and not garbage collected while running)
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


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


@dataclass
class RunningCluster:
    """One single-node cluster of the bed, as recorded in the state file."""

    name: str
    port: int
    controller_port: int
    advertised: str
    directory: str
    pid: int | None = None
    properties: dict[str, str] = field(default_factory=dict)
    # with an advertised address (a proxy in front) or a secured listener, a second,
    # PLAINTEXT listener that advertises itself, for filling and inspecting the cluster
    # without crossing the proxy or authenticating (a super user when ACLs are on)
    direct_port: int | None = None
    security: str = "PLAINTEXT"
    scram_users: dict[str, str] = field(default_factory=dict)
    authorizer: bool = False

    @property
    def bootstrap(self) -> str:
        return self.advertised

    @property
    def listen(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def direct(self) -> str:
        """A bootstrap address that does not go through a proxy."""
        return f"127.0.0.1:{self.direct_port}" if self.direct_port else self.advertised

    @property
    def log_path(self) -> Path:
        return Path(self.directory) / "broker.log"

    @property
    def certificates(self) -> Certificates:
        """The cluster's CA, broker and client certificates (made on first use)."""
        return make_certificates(Path(self.directory) / "tls")

    def _security_properties(self) -> dict[str, str]:
        props: dict[str, str] = {}
        name = self.security.lower()
        if "SSL" in self.security:
            certs = self.certificates
            props |= {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(certs.broker),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(certs.ca),
                "ssl.client.auth": "required" if self.security == "SSL" else "none",
            }
        if self.security.startswith("SASL"):
            props["sasl.enabled.mechanisms"] = "SCRAM-SHA-512,SCRAM-SHA-256"
            for mechanism in ("scram-sha-512", "scram-sha-256"):
                props[f"listener.name.{name}.{mechanism}.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
        if self.authorizer:
            props |= {
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:ANONYMOUS",  # the PLAINTEXT listeners: bed and controller
                "allow.everyone.if.no.acl.found": "true",
            }
        return props

    def server_properties(self) -> str:
        main = self.security
        listeners = f"{main}://{self.listen},CONTROLLER://127.0.0.1:{self.controller_port}"
        advertised = f"{main}://{self.advertised}"
        protocols = f"{main}:{main},CONTROLLER:PLAINTEXT"
        if self.direct_port:
            listeners += f",DIRECT://127.0.0.1:{self.direct_port}"
            advertised += f",DIRECT://127.0.0.1:{self.direct_port}"
            protocols += ",DIRECT:PLAINTEXT"
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": listeners,
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": protocols,
            "inter.broker.listener.name": "DIRECT" if self.direct_port else "PLAINTEXT",
            "log.dirs": str(Path(self.directory) / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.cleaner.backoff.ms": "1000",
        }
        props.update(self._security_properties())
        props.update(self.properties)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def is_running(self) -> bool:
        return self.pid is not None and _is_our_java(self.pid, self.directory)

    def start(self, jars: KafkaJars) -> None:
        """Format storage on first start, launch the JVM, wait until it answers metadata."""
        if self.is_running():
            return
        root = Path(self.directory)
        root.mkdir(parents=True, exist_ok=True)
        (root / "server.properties").write_text(self.server_properties())
        (root / "log4j2.properties").write_text(log4j_properties())
        if not (root / "data" / "meta.properties").exists():
            self._format(jars)
        self._launch(jars)

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._exited():
                raise TestbedError(
                    f"Kafka cluster {self.name!r} exited while starting; see {self.log_path}"
                )
            if probe_metadata(self.direct, timeout=5.0):
                return
            time.sleep(0.5)
        raise TestbedError(
            f"Kafka cluster {self.name!r} did not answer at {self.advertised} within"
            f" {timeout:.0f}s; see {self.log_path}"
        )

    def _exited(self) -> bool:
        """True once the JVM is gone (the exec may not show in /proc at once)."""
        child = _CHILDREN.get(self.pid) if self.pid is not None else None
        if child is not None:
            return child.poll() is not None
        return not self.is_running()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM for a clean shutdown; SIGKILL if it hangs. Idempotent."""
        if not self.is_running():
            self.pid = None
            return
        assert self.pid is not None
        _signal(self.pid, signal.SIGTERM)
        if not _wait_gone(self.pid, self.directory, timeout):
            log.warning("cluster %s did not stop in %.0fs; killing", self.name, timeout)
            _signal(self.pid, signal.SIGKILL)
            _wait_gone(self.pid, self.directory, 10.0)
        self.pid = None

    def kill(self) -> None:
        """SIGKILL: a crash, for fault tests."""
        if self.pid is not None and self.is_running():
            _signal(self.pid, signal.SIGKILL)
            _wait_gone(self.pid, self.directory, 10.0)
        self.pid = None

    def _java(self, jars: KafkaJars, main: str, *args: str, heap: str = HEAP) -> list[str]:
        return [
            "java",
            f"-Xmx{heap}",
            "-Xms128m",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={Path(self.directory) / 'log4j2.properties'}",
            f"-Dsyncer.testbed.dir={self.directory}",
            "-cp",
            jars.classpath,
            main,
            *args,
        ]

    def _format(self, jars: KafkaJars) -> None:
        cluster_id = _random_cluster_id()
        cmd = self._java(
            jars,
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={cluster_id}",  # an id may start with "-"
            "-c",
            str(Path(self.directory) / "server.properties"),
            *(
                f"--add-scram={mechanism}=[name={user},password={password}]"
                for user, password in self.scram_users.items()
                for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256")
            ),
            heap="256m",
        )
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["?"]
            raise TestbedError(f"formatting storage for {self.name!r} failed: {tail[0]}")

    def _launch(self, jars: KafkaJars) -> None:
        cmd = self._java(jars, "kafka.Kafka", str(Path(self.directory) / "server.properties"))
        with self.log_path.open("ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid = proc.pid
        _CHILDREN[proc.pid] = proc


def _random_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _is_our_java(pid: int, directory: str) -> bool:
    """True if pid is alive and is a JVM we started for this cluster directory."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    try:
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        status = "?"
    return status != "Z" and f"-Dsyncer.testbed.dir={directory}".encode() in cmdline


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _wait_gone(pid: int, directory: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        child = _CHILDREN.get(pid)
        if child is not None and child.poll() is not None:
            del _CHILDREN[pid]
        if not _is_our_java(pid, directory):
            return True
        time.sleep(0.2)
    return False


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
