"""Class-data sharing for the bed's JVMs: the classes a broker loads as it starts, archived
once per Kafka version and Java runtime (``-XX:ArchiveClassesAtExit``), then mapped by every
JVM the bed starts on that class path (``-XX:SharedArchiveFile``).

Measured here (2 cores): a one-node cluster up in 4.9-5.5 s instead of 9.4-10.2 s, three
nodes in 8.1-8.7 s instead of 18.9-20.6 s, the storage format tool 2.3 -> 1.35 s and the
perf producer 3.1 -> 2.2 s with the broker's archive. Only start-up changes: the archive
holds class metadata, not compiled code, so what a running broker does is the same.

The archive is made by a training broker: started with the dump flag, waited for until it
answers, stopped cleanly (the JVM writes the archive as it exits). A JVM whose build does
not match an archive maps none and starts as before (``-Xshare:auto``, the default), but the
archive's name carries the runtime's identity so that an upgraded Java trains a new one."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

from syncer.testbed.jars import KafkaJars, version_key

log = logging.getLogger(__name__)

# Kafka versions a KRaft training broker can run on (the ZooKeeper-mode ones start as before)
KRAFT_FROM = (3, 3)


@cache
def runtime_id() -> str | None:
    """The Java runtime on PATH, as its resolved path and its VM library's size and mtime:
    what changes when the JVM is upgraded in place. None without java."""
    java = shutil.which("java")
    if java is None:
        return None
    real = Path(java).resolve()
    vm = real.parent.parent / "lib" / "server" / "libjvm.so"
    stat = (vm if vm.exists() else real).stat()
    key = f"{real}:{stat.st_size}:{stat.st_mtime_ns}"
    return hashlib.sha1(key.encode()).hexdigest()[:12]


def archive_path(jars: KafkaJars) -> Path | None:
    """Where the archive of ``jars`` for the Java on PATH is (or would be) kept."""
    rid = runtime_id()
    return None if rid is None else jars.home / "cds" / f"broker-{rid}.jsa"


def java(jars: KafkaJars) -> list[str]:
    """The start of a JVM command line on ``jars``' class path: ``java`` and, once trained,
    the archive to map."""
    path = archive_path(jars)
    if path is None or not path.exists():
        return ["java"]
    return ["java", f"-XX:SharedArchiveFile={path}"]


def ensure(jars: KafkaJars, train: Callable[[Path, Path], None]) -> None:
    """Train the archive of ``jars`` unless it exists or an earlier training failed for this
    runtime. ``train(directory, dump)`` starts a broker in ``directory`` whose JVM writes its
    archive to ``dump`` when it exits cleanly, waits until it answers and stops it. Several
    processes may ask at once: one trains, the others wait for it. Never raises: without an
    archive every JVM starts as it did before."""
    path = archive_path(jars)
    if path is None or path.exists() or version_key(jars.version) < KRAFT_FROM:
        return
    failed = path.with_suffix(".failed")
    if failed.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.with_suffix(".lock")):
        if path.exists() or failed.exists():
            return
        dump = path.with_suffix(f".partial-{os.getpid()}")
        try:
            with tempfile.TemporaryDirectory(prefix="syncer-cds-") as directory:
                train(Path(directory), dump)
            if not dump.exists() or dump.stat().st_size == 0:
                raise RuntimeError("the training broker wrote no archive")
            os.replace(dump, path)
            log.info("class-data archive for Kafka %s written to %s", jars.version, path)
        except Exception as exc:  # the bed works without it, only slower to start
            failed.write_text(f"{type(exc).__name__}: {exc}\n")
            log.warning("no class-data archive for Kafka %s (%s): JVMs start slower", jars, exc)
        finally:
            dump.unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
