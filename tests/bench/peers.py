"""The two copiers a benchmark runs in turn on the same data: syncer and MirrorMaker 2
(dedicated mode, jars from the test bed), each measured as a child process: wall time from
launch to the last record copied, CPU seconds and peak RSS from the kernel's own accounting."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiokafka.structs import TopicPartition

from syncer.clusters import Cluster
from syncer.config import ClusterConfig
from syncer.errors import SyncerError
from syncer.testbed.bed import log4j_properties
from syncer.testbed.jars import KafkaJars
from syncer.waits import ENV


@dataclass(frozen=True)
class Measured:
    copier: str
    seconds: float  # first record copied → last record copied
    launch_to_last_s: float  # includes process start-up
    cpu_seconds: float
    peak_rss_mib: float
    records: int
    bytes: int
    # CPU seconds from the first record copied to the last: the copier's ("syncer") and
    # each broker's, where the run was asked to sample them
    window_cpu_s: dict[str, float] = field(default_factory=dict)
    # syncer's own counts of what it waited on (``syncer.waits``), where the run asked
    waits: dict[str, Any] = field(default_factory=dict)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds

    @property
    def cpu_s_per_gib(self) -> float:
        return self.cpu_seconds / (self.bytes / 2**30)


def cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by running process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# a JVM's threads by what they do, from their names as the kernel keeps them (15 characters:
# Kafka's request handlers and network threads both read "data-plane-kafk")
THREAD_GROUPS: tuple[tuple[str, str], ...] = (
    ("GC Thread", "gc"),
    ("G1 ", "gc"),
    ("C1 Compiler", "jit"),
    ("C2 Compiler", "jit"),
)
THREAD_GROUPS += (("data-plane-kafk", "requests"),)


def cpu_by_thread(pid: int) -> dict[str, float]:
    """CPU seconds so far of process ``pid``'s threads, by ``THREAD_GROUPS`` (else "other"):
    whether a broker's CPU went to appending or to its garbage collector and JIT."""
    groups: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        group = next((g for prefix, g in THREAD_GROUPS if name.startswith(prefix)), "other")
        groups[group] = groups.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / tick
        groups["runq"] = groups.get("runq", 0.0) + _runqueue_s(task)
    return groups


def _runqueue_s(task: Path) -> float:
    """Seconds thread ``task`` spent runnable but waiting for a core (schedstat's second
    field): a process that waits there wants CPU it does not get."""
    try:
        return int((task / "schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def runqueue_s(pid: int) -> float:
    """``_runqueue_s`` over every thread of process ``pid``."""
    return sum(_runqueue_s(task) for task in Path(f"/proc/{pid}/task").iterdir())


def pressure() -> dict[str, float]:
    """The machine's stall seconds so far (PSI, /proc/pressure): "cpu" while some task
    waited for a core, "io" while some waited for I/O, "io_full" while all did."""
    out: dict[str, float] = {}
    for kind in ("cpu", "io"):
        try:
            lines = Path(f"/proc/pressure/{kind}").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            scope, *fields = line.split()
            total = int(dict(f.split("=") for f in fields)["total"]) / 1e6
            out[kind if scope == "some" else f"{kind}_full"] = total
    return out


def machine_busy() -> float:
    """CPU seconds every core of the machine spent busy so far (/proc/stat): what else ran
    while a copy ran (other engineers' tests share the cores)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _reap(pid: int) -> tuple[float, float]:
    """Wait for child ``pid``; its (CPU seconds, peak RSS in MiB)."""
    _pid, _status, usage = os.wait4(pid, 0)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


async def local_total(bootstrap: str, topic: str, partitions: int) -> int:
    async with Cluster(ClusterConfig(bootstrap, name="bench"), role="bench") as cluster:
        try:
            ends = await cluster.latest([TopicPartition(topic, p) for p in range(partitions)])
        except SyncerError:
            return 0
    return sum(ends.values())


def run_syncer(
    workdir: Path,
    local: str,
    remote: str | dict[str, str],
    topic: str,
    records: int,
    size: int,
    *,
    partitions: int = 8,
    label: str = "syncer",
    copier: dict[str, int] | None = None,
    remote_settings: dict[str, int] | None = None,
    profile: Path | None = None,
    brokers: Callable[[], dict[str, float]] | None = None,
    tree: Path | None = None,
) -> Measured:
    """``tree``: run the syncer package of that checkout (an A/B against another commit),
    not this one's. ``profile``: py-spy samples syncer (without pausing it) into that file,
    collapsed stacks (``tests.bench.raw.profile_summary`` reads them). ``brokers``: each
    broker's CPU seconds so far, sampled with syncer's own at the first record and after the
    last."""
    remotes = {"east": remote} if isinstance(remote, str) else remote
    config = workdir / f"{label.replace(' ', '-')}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "local": {"bootstrap_servers": local},
                "remotes": [
                    {"name": n, "bootstrap_servers": b, **(remote_settings or {})}
                    for n, b in remotes.items()
                ],
                "topics": {"include": [topic]},
                "copier": copier or {},
            }
        )
    )
    waits = workdir / f"{label.replace(' ', '-')}-waits.json"
    waits.unlink(missing_ok=True)
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "syncer", "catch-up", "-c", str(config), "--no-progress"],
        env={**os.environ, ENV: str(waits)}
        | ({"PYTHONPATH": str(tree)} if tree is not None else {}),
        cwd=tree,  # ``-m`` looks in the working directory first
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "syncer.log", "w"),  # noqa: SIM115
    )
    spy = None
    if profile is not None:
        spy = subprocess.Popen(
            [
                *(Path(sys.executable).parent / "py-spy", "record", "--pid", str(proc.pid)),
                *("--nonblocking", "--format", "raw", "--rate", "100", "-o", str(profile)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    samples: list[dict[str, float]] = []

    def sample() -> dict[str, float]:
        return {
            **(brokers() if brokers else {}),
            "syncer": cpu_seconds(proc.pid),
            "syncer/runq": runqueue_s(proc.pid),
        }

    log = workdir / "syncer.log"
    first, last = watch(proc, local, topic, partitions, records, log, sample, samples)
    cpu, rss = _reap(proc.pid)
    if spy is not None:
        spy.wait(timeout=60)  # writes its file once syncer is gone
    proc.returncode = 0
    window = {k: samples[-1][k] - samples[0][k] for k in samples[0]} if len(samples) == 2 else {}
    counted = json.loads(waits.read_text()) if waits.exists() else {}
    return Measured(label, last - first, last - started, cpu, rss, records, size, window, counted)


async def _open(bootstrap: str) -> Cluster:
    cluster = Cluster(ClusterConfig(bootstrap, name="bench"), role="bench")
    await cluster.start()
    return cluster


def watch(
    proc: subprocess.Popen[bytes],
    local: str,
    topic: str,
    partitions: int,
    records: int,
    log: Path,
    sample: Callable[[], dict[str, float]] | None = None,
    samples: list[dict[str, float]] | None = None,
) -> tuple[float, float]:
    """Poll the local ends (one client, four times a second, so the watching costs little CPU)
    until ``records`` are copied: (time of the first, time of the last). ``sample``: called
    when the first record is seen and after the last, its values appended to ``samples``."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with asyncio.Runner() as runner:
        cluster = runner.run(_open(local))

        async def total() -> int:
            try:
                return sum((await cluster.latest(tps)).values())
            except SyncerError:
                return 0

        try:
            copied, first, progress_at = 0, 0.0, time.monotonic()
            while copied < records:
                now = time.monotonic()
                if now - progress_at > 120:
                    proc.kill()
                    raise RuntimeError(f"copier stalled; see {log}")
                latest = runner.run(total())
                if latest > copied:
                    if not first and sample is not None and samples is not None:
                        samples.append(sample())
                    copied, progress_at = latest, now
                    first = first or now
                elif proc.poll() is not None:
                    raise RuntimeError(f"copier exited with {copied} of {records}; see {log}")
                if copied < records:
                    time.sleep(0.25)
            if sample is not None and samples is not None:
                samples.append(sample())
            return first, time.monotonic()
        finally:
            runner.run(cluster.stop())


MM2_PROPERTIES = """
clusters = east, local
east.bootstrap.servers = {remote}
local.bootstrap.servers = {local}
east->local.enabled = true
local->east.enabled = false
east->local.topics = {topic}
tasks.max = {tasks}
replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset-syncs.topic.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
config.storage.replication.factor = 1
sync.topic.acls.enabled = false
emit.checkpoints.interval.seconds = 3600
refresh.topics.interval.seconds = 5
# throughput settings the way operators tune them for bulk copies; larger fetch and buffer
# sizes ran the 1 GiB heap out of memory with 8 tasks
local.producer.batch.size = 262144
local.producer.linger.ms = 10
local.producer.acks = all
east.consumer.max.poll.records = 2000
"""

# 512 MiB ran out of heap with 8 tasks and the batch sizes above; 1 GiB is a modest
# production setting for one MirrorMaker 2 process.
MM2_HEAP = "1g"


def run_mm2(
    workdir: Path,
    jars: KafkaJars,
    local: str,
    remote: str,
    topic: str,
    records: int,
    size: int,
    partitions: int,
    tasks: int,
    extra: str = "",
) -> Measured:
    props = workdir / "mm2.properties"
    props.write_text(
        MM2_PROPERTIES.format(remote=remote, local=local, topic=topic, tasks=tasks) + extra
    )
    (workdir / "log4j2.properties").write_text(log4j_properties("WARN"))
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            "java",
            f"-Xmx{MM2_HEAP}",
            "-Xms128m",
            "-XX:+UseG1GC",
            f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}",
            "-cp",
            jars.classpath,
            "org.apache.kafka.connect.mirror.MirrorMaker",
            str(props),
        ],
        stdout=open(workdir / "mm2.log", "w"),  # noqa: SIM115 -- lives as long as the JVM
        stderr=subprocess.STDOUT,
    )
    first, last = watch(proc, local, f"east.{topic}", partitions, records, workdir / "mm2.log")
    proc.send_signal(signal.SIGTERM)
    cpu, rss = _reap(proc.pid)
    proc.returncode = 0
    return Measured(f"MM2 tasks={tasks}", last - first, last - started, cpu, rss, records, size)


def start_proxy(port: int, target: str, *, rate: int, latency_ms: float) -> subprocess.Popen[bytes]:
    """The test bed's link proxy in a process of its own (the copiers' load must not slow
    it): listens on ``port``, forwards to ``target``, caps each connection at ``rate``."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "syncer.testbed.proxy",
            "--listen",
            str(port),
            "--target",
            target,
            "--rate",
            str(rate),
            "--latency-ms",
            str(latency_ms),
        ]
    )


def axes(width: float = 7.0) -> tuple[Any, Any]:
    """A matplotlib figure and axes for a PNG, no display needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, 4.5), dpi=110)


def save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path)
