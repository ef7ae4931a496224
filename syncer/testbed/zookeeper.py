"""The ZooKeeper server of an old (pre-4.0) Kafka cluster of the bed, run from the jars Kafka
depends on (Kafka 2.8 pulls ZooKeeper 3.5.9): one standalone server per cluster on loopback,
with its own port, data directory and small JVM.

Kafka 4.0 removed ZooKeeper; many clusters still to be migrated run on it, so the bed starts
them the way they run: a ZooKeeper first, then a broker that registers in it."""

from __future__ import annotations

import logging
import signal
import socket
import time
from pathlib import Path

from syncer.testbed.errors import TestbedError
from syncer.testbed.jars import KafkaJars
from syncer.testbed.process import (
    exited,
    is_our_java,
    java_command,
    launch,
    send_signal,
    wait_gone,
    write_log1_config,
)

log = logging.getLogger(__name__)

ZOOKEEPER_HEAP = "128m"
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
START_TIMEOUT_S = 30.0


def zookeeper_properties(data_dir: Path | str, port: int) -> str:
    """A standalone server on loopback. The admin server (an HTTP port of its own, 8080 by
    default) is off: two beds on one machine would fight over it."""
    props = {
        "dataDir": str(data_dir),
        "clientPort": str(port),
        "clientPortAddress": "127.0.0.1",
        "tickTime": "2000",
        "maxClientCnxns": "0",
        "admin.enableServer": "false",
        "4lw.commands.whitelist": "ruok,srvr",
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def answers(port: int, timeout: float = 2.0) -> bool:
    """Does the server on ``port`` say it is ok (``ruok`` → ``imok``)?"""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"ruok")
            return sock.recv(4) == b"imok"
    except OSError:
        return False


class ZooKeeper:
    """The ZooKeeper of one cluster, in ``directory`` (its JVM is marked with it)."""

    def __init__(self, directory: Path | str, port: int, pid: int | None = None) -> None:
        self.directory = str(directory)
        self.port = port
        self.pid = pid

    @property
    def log_path(self) -> Path:
        return Path(self.directory) / "zookeeper.log"

    def is_running(self) -> bool:
        return self.pid is not None and is_our_java(self.pid, self.directory)

    def start(self, jars: KafkaJars) -> int:
        """Launch unless running, wait until it answers; its pid."""
        if self.is_running():
            assert self.pid is not None
            return self.pid
        root = Path(self.directory)
        (root / "data").mkdir(parents=True, exist_ok=True)
        config = root / "zookeeper.properties"
        config.write_text(zookeeper_properties(root / "data", self.port))
        write_log1_config(jars, self.directory)
        cmd = java_command(jars, self.directory, ZOOKEEPER_MAIN, str(config), heap=ZOOKEEPER_HEAP)
        self.pid = launch(cmd, self.log_path)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if exited(self.pid, self.directory):
                raise TestbedError(f"ZooKeeper exited while starting; see {self.log_path}")
            if answers(self.port):
                return self.pid
            time.sleep(0.2)
        raise TestbedError(
            f"ZooKeeper did not answer on port {self.port} within {START_TIMEOUT_S:.0f}s;"
            f" see {self.log_path}"
        )

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, SIGKILL if it hangs. Idempotent."""
        if self.pid is None or not self.is_running():
            self.pid = None
            return
        send_signal(self.pid, signal.SIGTERM)
        if not wait_gone(self.pid, self.directory, timeout):
            log.warning("ZooKeeper in %s did not stop in %.0fs; killing", self.directory, timeout)
            send_signal(self.pid, signal.SIGKILL)
            wait_gone(self.pid, self.directory, 10.0)
        self.pid = None
