"""The JVMs of the bed as operating-system processes: launch one, find out whether a pid is
still the JVM we started for a cluster directory, signal it and wait until it is gone.

A pid alone is not enough to know a cluster runs: the state file outlives the processes, and
the pid may since belong to something else. The JVM's command line names its directory."""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from syncer.testbed import cds
from syncer.testbed.jars import KafkaJars, uses_log4j1

HEAP = "512m"

# Kafka before 4.0 (and its ZooKeeper) log through log4j 1.x: the same one line per event
LOG4J1_PROPERTIES = """log4j.rootLogger=INFO, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
"""

# JVMs this process started, kept so they are reaped (and not garbage collected while running)
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def java_command(
    jars: KafkaJars,
    directory: str,
    main: str,
    *args: str,
    heap: str = HEAP,
    options: Sequence[str] = (),
) -> list[str]:
    """A JVM for the cluster in ``directory``, marked with it so it can be found again, with
    the JVM ``options`` given. Its log configuration is the file ``write_log1_config`` or the
    node's ``log4j2.properties``; it maps the class-data archive once there is one."""
    if uses_log4j1(jars.version):
        logging = f"-Dlog4j.configuration=file:{Path(directory) / 'log4j.properties'}"
    else:
        logging = f"-Dlog4j2.configurationFile={Path(directory) / 'log4j2.properties'}"
    return [
        *cds.java(jars),
        *options,
        # the heap fixed at its size, as Kafka's own start script runs a broker: grown from
        # a small start, the brokers collected their way up through a bed's first minutes,
        # and whatever ran first paid for it (bench-steady's first round, the floor alone:
        # the remote read's p99 6.0-7.5 ms against 4.9-5.7 with a fixed heap, 4.0-4.6 later)
        f"-Xmx{heap}",
        f"-Xms{heap}",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        logging,
        f"-Dsyncer.testbed.dir={directory}",
        "-cp",
        jars.classpath,
        main,
        *args,
    ]


def write_log1_config(jars: KafkaJars, directory: str) -> None:
    """The log4j 1.x configuration of a JVM of an old version (none needed for 4.x)."""
    if uses_log4j1(jars.version):
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / "log4j.properties").write_text(LOG4J1_PROPERTIES)


def launch(cmd: list[str], log_path: Path) -> int:
    """Start ``cmd`` in its own session (a Ctrl-C at the terminal does not reach it), its
    output appended to ``log_path``; its pid."""
    with log_path.open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc.pid


def random_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def is_our_java(pid: int, directory: str) -> bool:
    """True if pid is alive and is a JVM we started for this cluster directory."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    try:
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        status = "?"
    # the argument whole (arguments end in NUL): /bed/local is not /bed/local2 nor /bed/local/n1
    return status != "Z" and f"-Dsyncer.testbed.dir={directory}\0".encode() in cmdline


def exited(pid: int, directory: str) -> bool:
    """True once the JVM is gone (the exec may not show in /proc at once)."""
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is not None
    return not is_our_java(pid, directory)


def send_signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def wait_gone(pid: int, directory: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        child = _CHILDREN.get(pid)
        if child is not None and child.poll() is not None:
            del _CHILDREN[pid]
        if not is_our_java(pid, directory):
            return True
        time.sleep(0.2)
    return False
