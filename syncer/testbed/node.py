"""One node of the bed: a KRaft node's settings, files and JVM — a single-node cluster of its
own, or one member of a cluster of several (``quorum``). What it is listening on and where its
files are is recorded in the bed's state file; how it runs as a process is ``process``."""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from syncer.testbed.errors import TestbedError
from syncer.testbed.jars import KafkaJars, has_zookeeper, version_key
from syncer.testbed.probe import probe_metadata
from syncer.testbed.process import (
    HEAP,
    exited,
    is_our_java,
    java_command,
    launch,
    random_cluster_id,
    send_signal,
    wait_gone,
    write_log1_config,
)
from syncer.testbed.tls import Certificates, make_certificates
from syncer.testbed.zookeeper import ZooKeeper

log = logging.getLogger(__name__)

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0


RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


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


# what every one-node cluster of the bed is set to, in KRaft or in ZooKeeper mode
_COMMON = {
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "log.cleaner.backoff.ms": "1000",
    # tests stamp records with fixed times years back; under Kafka's default week of time
    # retention a retention check (every 5 min) emptied such a log in the middle of a test
    # (log start = end, nothing to read). A topic that wants retention sets its own.
    "log.retention.ms": "-1",
}


def _as_properties(props: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in props.items())


ZOOKEEPER = "zookeeper"
ZOOKEEPER_SESSION_S = 6  # a ZooKeeper-mode broker's session (ZooKeeper's floor is 4 s)
KRAFT = "kraft"
MODES = (ZOOKEEPER, KRAFT)
# KRaft was production-ready from 3.3 (KIP-833); earlier versions had it as early access only
FIRST_KRAFT = (3, 3)


def cluster_mode(version: str | None, mode: str | None = None) -> str:
    """Where a cluster of ``version`` (None: the bed's own 4.x) keeps its metadata: ``mode``
    if given and possible, else ZooKeeper before 4.0 (how most clusters still to be migrated
    run) and KRaft from 4.0 (which removed ZooKeeper)."""
    if mode is not None and mode not in MODES:
        raise TestbedError(f"no such cluster mode {mode!r} (want one of {', '.join(MODES)})")
    zookeeper_possible = version is not None and has_zookeeper(version)
    if mode is None:
        return ZOOKEEPER if zookeeper_possible else KRAFT
    if mode == ZOOKEEPER and not zookeeper_possible:
        raise TestbedError(
            f"Kafka {version or 'of the bed'} has no ZooKeeper mode (removed in 4.0)"
        )
    if mode == KRAFT and version is not None and version_key(version) < FIRST_KRAFT:
        raise TestbedError(
            f"Kafka {version} has no production KRaft mode (from 3.3 on): run it in ZooKeeper mode"
        )
    return mode


def has_share_groups(version: str | None) -> bool:
    """Does a KRaft node of ``version`` know the share coordinator's settings (KIP-932,
    4.0 on)? A 3.9 node logs each unknown setting as a warning; the bed leaves them out."""
    return version is None or version_key(version) >= (4,)


@dataclass
class RunningCluster:
    """One single-node cluster of the bed, or one node of a cluster of several, as recorded in
    the state file. ``node_id`` to ``cluster_id`` are only set on a member of a bigger
    cluster."""

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
    # a member of a cluster of several: its id, the quorum's voters (``id@host:port,...``),
    # its rack, and the cluster id every member's storage is formatted with
    node_id: int = 1
    voters: str | None = None
    rack: str | None = None
    cluster_id: str | None = None
    heap: str = HEAP  # the JVM's -Xmx
    # an older Kafka than the bed's (None: the bed's own); where it keeps its metadata
    # (``cluster_mode``); in ZooKeeper mode with its ZooKeeper on this port and that JVM's pid
    version: str | None = None
    mode: str = KRAFT
    zookeeper_port: int | None = None
    zookeeper_pid: int | None = None
    # options of the broker's JVM beyond the bed's own (the class-data archive's training)
    jvm_options: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.zookeeper_port is not None:  # a state file written before modes were recorded
            self.mode = ZOOKEEPER

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

    @property
    def zookeeper(self) -> ZooKeeper | None:
        """The cluster's own ZooKeeper, if it runs in ZooKeeper mode."""
        if self.zookeeper_port is None:
            return None
        directory = Path(self.directory) / "zookeeper"
        return ZooKeeper(directory, self.zookeeper_port, self.zookeeper_pid)

    def server_properties(self) -> str:
        if self.mode == ZOOKEEPER:
            return _as_properties(self.zookeeper_mode_properties())
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
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters or f"1@127.0.0.1:{self.controller_port}",
            "listeners": listeners,
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": protocols,
            "inter.broker.listener.name": "DIRECT" if self.direct_port else "PLAINTEXT",
            "log.dirs": str(Path(self.directory) / "data"),
            **_COMMON,
        }
        if has_share_groups(self.version):
            props["share.coordinator.state.topic.replication.factor"] = "1"
            props["share.coordinator.state.topic.min.isr"] = "1"
        if self.rack is not None:
            # a member of a cluster of several: a consumer that names its rack in its fetches
            # is sent to the in-sync replica in that rack (KIP-392); one that names none
            # (every client but a syncer with client_rack) reads from the leader as before
            props["broker.rack"] = self.rack
            props["replica.selector.class"] = RACK_AWARE_SELECTOR
        props.update(self._security_properties())
        props.update(self.properties)
        return _as_properties(props)

    def zookeeper_mode_properties(self) -> dict[str, str]:
        """A broker of an old cluster that keeps its metadata in its ZooKeeper: one
        PLAINTEXT listener, no controller quorum, no storage to format."""
        props = {
            "broker.id": str(self.node_id),
            "zookeeper.connect": f"127.0.0.1:{self.zookeeper_port}",
            "zookeeper.connection.timeout.ms": "30000",
            # a broker killed with kill -9 registers again only once ZooKeeper expired its
            # session (/brokers/ids/N, NodeExists before): 6 s, not the 18 s default
            "zookeeper.session.timeout.ms": str(ZOOKEEPER_SESSION_S * 1000),
            "listeners": f"PLAINTEXT://{self.listen}",
            "advertised.listeners": f"PLAINTEXT://{self.advertised}",
            "log.dirs": str(Path(self.directory) / "data"),
            **_COMMON,
        }
        props.update(self.properties)
        return props

    def is_running(self) -> bool:
        return self.pid is not None and is_our_java(self.pid, self.directory)

    @property
    def members(self) -> list[RunningCluster]:
        """The nodes of this cluster: itself (a cluster of several answers with each)."""
        return [self]

    def start(self, jars: KafkaJars) -> None:
        """Format storage on first start, launch the JVM, wait until it answers metadata."""
        if self.is_running():
            return
        root = Path(self.directory)
        root.mkdir(parents=True, exist_ok=True)
        (root / "server.properties").write_text(self.server_properties())
        (root / "log4j2.properties").write_text(log4j_properties())
        write_log1_config(jars, self.directory)
        zookeeper = self.zookeeper
        if zookeeper is not None:  # its metadata lives there: up first, nothing to format
            self.zookeeper_pid = zookeeper.start(jars)
        elif not (root / "data" / "meta.properties").exists():
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
        return self.pid is None or exited(self.pid, self.directory)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM for a clean shutdown; SIGKILL if it hangs; then its ZooKeeper, if it
        has one (the broker deregisters there first). Idempotent."""
        self._stop_broker(timeout)
        zookeeper = self.zookeeper
        if zookeeper is not None:
            zookeeper.stop()
            self.zookeeper_pid = None

    def _stop_broker(self, timeout: float) -> None:
        if not self.is_running():
            self.pid = None
            return
        assert self.pid is not None
        send_signal(self.pid, signal.SIGTERM)
        if not wait_gone(self.pid, self.directory, timeout):
            log.warning("cluster %s did not stop in %.0fs; killing", self.name, timeout)
            send_signal(self.pid, signal.SIGKILL)
            wait_gone(self.pid, self.directory, 10.0)
        self.pid = None

    def kill(self) -> None:
        """SIGKILL: a crash, for fault tests."""
        if self.pid is not None and self.is_running():
            send_signal(self.pid, signal.SIGKILL)
            wait_gone(self.pid, self.directory, 10.0)
        self.pid = None

    def _format(self, jars: KafkaJars) -> None:
        cluster_id = self.cluster_id or random_cluster_id()
        cmd = java_command(
            jars,
            self.directory,
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
        server = str(Path(self.directory) / "server.properties")
        cmd = java_command(
            jars, self.directory, "kafka.Kafka", server, heap=self.heap, options=self.jvm_options
        )
        self.pid = launch(cmd, self.log_path)
