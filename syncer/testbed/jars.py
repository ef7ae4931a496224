"""Apache Kafka jars from Maven Central, fetched once with ``mvn`` into a cache directory."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from syncer.testbed.errors import TestbedError

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"

Artifact = tuple[str, str, str]  # group, artifact, version

# kafka_2.13 is the broker; kafka-tools has the perf-test tools; connect-mirror is MirrorMaker 2,
# our benchmark peer. log4j-core + the slf4j 1.x binding give the JVMs a log they write to.
ARTIFACTS: tuple[Artifact, ...] = (
    ("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
    ("org.apache.kafka", "kafka-tools", KAFKA_VERSION),
    ("org.apache.kafka", "connect-runtime", KAFKA_VERSION),
    ("org.apache.kafka", "connect-mirror", KAFKA_VERSION),
    ("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
    ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
)

# Older versions are remotes to copy from (or locals to copy into), not benchmark peers: the
# broker alone (kafka_2.13 pulls its ZooKeeper, whose jars start ZooKeeper's server too), and
# the log4j 1.x binding Kafka shipped with before 4.0 moved to log4j 2 (3.x ships reload4j, the
# same API; 2.8.2 and 3.9.2 are tried).
_LOG4J1: tuple[Artifact, ...] = (
    ("org.slf4j", "slf4j-log4j12", "1.7.30"),
    ("log4j", "log4j", "1.2.17"),
)


def artifacts(version: str) -> tuple[Artifact, ...]:
    """The Maven artifacts a test bed of Kafka ``version`` needs."""
    if version == KAFKA_VERSION:
        return ARTIFACTS
    if uses_log4j1(version):
        return (("org.apache.kafka", "kafka_2.13", version), *_LOG4J1)
    return (
        ("org.apache.kafka", "kafka_2.13", version),
        ("org.apache.kafka", "kafka-tools", version),
        ("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
        ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
    )


def version_key(version: str) -> tuple[int, ...]:
    """``"2.8.2"`` → ``(2, 8, 2)``, for comparing versions."""
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        raise TestbedError(f"not a Kafka version: {version!r} (want e.g. 2.8.2)") from None


def uses_log4j1(version: str) -> bool:
    """Kafka before 4.0 logs through log4j 1.x (``-Dlog4j.configuration``); 4.x through
    log4j 2 (``-Dlog4j2.configurationFile``)."""
    return version_key(version) < (4,)


def has_zookeeper(version: str) -> bool:
    """Kafka before 4.0 can run in ZooKeeper mode (and the bed runs it so); 4.0 removed it."""
    return version_key(version) < (4,)


def default_cache_dir() -> Path:
    override = os.environ.get("SYNCER_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "syncer"


def _pom(version: str = KAFKA_VERSION) -> str:
    deps = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>"
        for g, a, v in artifacts(version)
    )
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>syncer</groupId><artifactId>testbed-jars</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def require_tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise TestbedError(f"{name} not found on PATH: {hint}")
    return path


@dataclass(frozen=True)
class KafkaJars:
    """The class path of one pinned Kafka version, in a cache outside the repository."""

    cache_dir: Path
    version: str = KAFKA_VERSION

    @classmethod
    def default(cls) -> KafkaJars:
        return cls(default_cache_dir())

    @property
    def home(self) -> Path:
        return self.cache_dir / f"kafka-{self.version}"

    @property
    def libs(self) -> Path:
        return self.home / "libs"

    @property
    def classpath(self) -> str:
        return str(self.libs / "*")

    def is_complete(self) -> bool:
        return (self.home / ".complete").exists()

    def ensure(self) -> KafkaJars:
        """Fetch the jars unless the cache already holds them; return self."""
        if self.is_complete():
            return self
        require_tool("java", "install a Java 17+ runtime (Debian: openjdk-17-jre-headless)")
        mvn = require_tool("mvn", "install Apache Maven (Debian: maven)")
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "pom.xml").write_text(_pom(self.version))
        staging = self.home / "libs.partial"
        shutil.rmtree(staging, ignore_errors=True)
        log.info(
            "fetching Apache Kafka %s jars from Maven Central into %s", self.version, self.libs
        )
        mvn_log = self.home / "mvn.log"
        with mvn_log.open("w") as out:
            result = subprocess.run(
                [
                    mvn,
                    "-B",
                    "-q",
                    "-f",
                    str(self.home / "pom.xml"),
                    "dependency:copy-dependencies",
                    f"-DoutputDirectory={staging}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if result.returncode != 0:
            raise TestbedError(
                f"downloading Kafka {self.version} jars with mvn failed (exit {result.returncode});"
                f" see {mvn_log}"
            )
        shutil.rmtree(self.libs, ignore_errors=True)
        staging.rename(self.libs)
        (self.home / ".complete").write_text(self.version + "\n")
        return self
