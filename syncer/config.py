"""Typed, validated settings loaded from YAML.

Step one (here) parses and checks everything, reporting every problem at once with its path
(``remotes[1].bootstrap_servers: required``): the settings are the dataclasses below, built
from YAML by ``typed`` (unknown keys are errors; ``${VAR}`` and ``${VAR:-default}`` are
replaced from the environment in every string); the rules that span fields are here.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from syncer.config_security import check_security
from syncer.errors import ConfigError
from syncer.typed import build, first_per_path, interpolate, keep_python_only, unbuild

MAX_LANES = 64
MAX_INT32 = 2**31 - 1  # a request's size, timeout or count field on the wire
# a topic name Kafka accepts (``Topic.validate``): these characters, at most 249 of them
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
COALESCE_MAX_BYTES = 1024 * 1024  # copier.coalesce_bytes at most
DEFAULT_COPIED_CONFIGS: tuple[str, ...] = tuple(
    ["cleanup.policy", "retention.ms", "retention.bytes", "max.message.bytes", "compression.type"]
)


@dataclass(frozen=True)
class ClusterConfig:
    """How to reach one cluster."""

    bootstrap_servers: str
    name: str = ""
    client_id: str = "syncer"
    request_timeout_ms: int = 30_000
    metadata_max_age_ms: int = 60_000
    # lanes: independent clients, each with its own TCP connections (remotes only)
    connections: int = 1
    # SO_RCVBUF / SO_SNDBUF of every connection; -1 leaves the OS's (auto-tuned) default
    socket_receive_buffer_bytes: int = -1
    socket_send_buffer_bytes: int = -1
    # this remote's fetch sizes; 0 takes copier.fetch_max_bytes / partition_fetch_max_bytes
    fetch_max_bytes: int = 0
    partition_fetch_max_bytes: int = 0
    client_rack: str | None = None  # remotes: fetch from the replica in this rack (KIP-392)
    # remotes: bytes per second this process fetches from it at most, over all lanes (0: no cap)
    max_bytes_per_second: int = 0
    # security: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str = ""  # the CA that signed the brokers' certificates ("" = the system's)
    ssl_certfile: str = ""  # a client certificate, for brokers that ask for one
    ssl_keyfile: str = ""
    ssl_key_password: str = field(default="", repr=False)
    ssl_key_password_file: str = ""
    ssl_check_hostname: bool = True
    sasl_mechanism: str = ""  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)
    sasl_password_file: str = ""  # read at load; one trailing newline dropped
    # OAUTHBEARER: an aiokafka AbstractTokenProvider, set from Python (not from YAML)
    sasl_oauth_token_provider: Any = field(
        default=None, repr=False, compare=False, metadata={"python_only": True}
    )


class HolePolicy(StrEnum):
    """What a hole in the source (compaction gap, transaction marker, aborted data) does."""

    HALT = "halt"  # the partition halts at it
    FILL = "fill"  # filler records take its offsets


@dataclass(frozen=True)
class TopicsConfig:
    """Which topics to mirror and how to create them locally."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    create_missing: bool = True
    copy_configs: tuple[str, ...] = DEFAULT_COPIED_CONFIGS
    replication_factor: int = -1  # -1: the local cluster's default
    on_hole: HolePolicy = HolePolicy.HALT
    fill: tuple[str, ...] = ()  # topics (regexes) whose holes are filled whatever on_hole says
    # a new, empty local partition whose remotes start above 0: filler up to their start,
    # then DeleteRecords, so local start and end equal the remote's (else: data lost, halt)
    align_start: bool = False
    refresh_interval_s: float = 30.0
    # keep copy_configs equal to the remote's on every refresh, not only at creation
    sync_configs: bool = True

    def selects(self, topic: str) -> bool:
        if topic.startswith("__"):
            return False  # Kafka's internal topics are never mirrored
        return _selected(topic, self.include, self.exclude)

    def fills(self, topic: str) -> bool:
        """Are ``topic``'s holes filled (else its partitions halt at one)?"""
        return self.on_hole == HolePolicy.FILL or _matches(topic, self.fill)


@dataclass(frozen=True)
class CopierConfig:
    """Sizes and pacing of the data path."""

    # a response is held twice while it is decoded: 4 MiB keeps the two in flight on a
    # connection small (64 partitions: peak RSS 224 MiB with 32 MiB, 112-118 with 4 MiB and
    # buffer_bytes 16 MiB, at 75-100% of the throughput)
    fetch_max_bytes: int = 4 * 1024 * 1024
    partition_fetch_max_bytes: int = 1024 * 1024
    fetch_max_wait_ms: int = 500
    max_in_flight: int = 5
    # small uncompressed batches that arrive together are written as one batch of up to this
    # many bytes, each record at its own offset (0: every source batch written as it is)
    coalesce_bytes: int = 64 * 1024
    # chunks of one partition fetched at once, from any remotes that hold them, plus the
    # fetched ones waiting to be written in order (the reorder buffer)
    max_chunks: int = 8
    # bytes fetched and not yet written or being written, for the whole process (all
    # partitions): new fetches wait while it is full, except the one each partition's next
    # write needs; raise it for a fast link with a long round trip (bandwidth x delay)
    buffer_bytes: int = 16 * 1024 * 1024
    chunk_timeout_ms: int = 15_000  # a fetch slower than this counts against its remote
    retry_backoff_ms: int = 200
    retry_backoff_max_ms: int = 10_000
    shutdown_timeout_s: float = 30.0
    # bytes per second fetched from all remotes together at most (0: no cap)
    max_bytes_per_second: int = 0


@dataclass(frozen=True)
class CoordinationConfig:
    """Share the partitions among the processes of one group on the local cluster."""

    group: str = ""
    instance_id: str = ""  # static membership (group.instance.id): rolling restarts keep work
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 1_000
    # stop writing when no heartbeat was answered for this long (below the session timeout)
    lease_ms: int = 6_000

    @property
    def enabled(self) -> bool:
        return bool(self.group)


@dataclass(frozen=True)
class HttpConfig:
    """The daemon's HTTP endpoint: /metrics (Prometheus), /status (JSON), /healthz, /readyz."""

    listen: str = "127.0.0.1:9644"  # host:port; "" turns it off; port 0 picks a free one

    @property
    def address(self) -> tuple[str, int] | None:
        if not self.listen:
            return None
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)


@dataclass(frozen=True)
class GroupsConfig:
    """Consumer groups whose committed offsets are copied from the remotes, unchanged."""

    include: tuple[str, ...] = ()  # regexes; none: no offsets are copied
    exclude: tuple[str, ...] = ()
    interval_s: float = 10.0

    def selects(self, group: str) -> bool:
        return _selected(group, self.include, self.exclude)


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(re.fullmatch(p, name) for p in patterns)


def _selected(name: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> bool:
    return _matches(name, include) and not _matches(name, exclude)


@dataclass(frozen=True)
class Config:
    """Everything a syncer deployment needs."""

    local: ClusterConfig
    remotes: tuple[ClusterConfig, ...]
    topics: TopicsConfig
    name: str = "syncer"
    state_topic: str = "_syncer_state"
    copier: CopierConfig = field(default_factory=CopierConfig)
    coordination: CoordinationConfig = field(default_factory=CoordinationConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    groups: GroupsConfig = field(default_factory=GroupsConfig)

    @classmethod
    def from_file(cls, path: str | Path) -> Config:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError([f"cannot read: {exc.strerror}"], str(path)) from exc
        except UnicodeDecodeError as exc:
            raise ConfigError([f"not UTF-8 text: {_not_utf8(exc)}"], str(path)) from exc
        return cls.from_yaml(text, source=str(path))

    @classmethod
    def from_yaml(cls, text: str, source: str = "config") -> Config:
        try:
            raw = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise ConfigError([f"malformed YAML: {where}{problem}"], source) from exc
        return cls.from_dict(raw, source=source)

    @classmethod
    def from_dict(cls, raw: Any, source: str = "config") -> Config:
        problems: list[str] = []
        return _validated(
            build(cls, interpolate(raw, "", problems), "", problems), problems, source
        )

    def validate(self, source: str = "config") -> Config:
        """This config, built in code, checked as ``from_dict`` checks a file (same rules,
        same messages; no ``${VAR}`` substitution); secret files read. ``Syncer`` calls it."""
        problems: list[str] = []
        raw = unbuild(self, leave_out=_secret_from_file)
        checked = _validated(build(Config, raw, "", problems), problems, source)
        kept: Config = keep_python_only(checked, self)
        return kept

    def remote(self, name: str) -> ClusterConfig:
        return next(r for r in self.remotes if r.name == name)

    def mirrors(self, topic: str) -> bool:
        """Is ``topic`` mirrored: selected, and not syncer's own state topic (a remote that
        is another deployment's local cluster holds one of the same name)?"""
        return topic != self.state_topic and self.topics.selects(topic)


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``, but a key given twice in one mapping is an error (PyYAML keeps
    the last: a second ``topics:`` block would silently replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # ``<<: *anchor``: its keys may be given again here, on purpose
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                continue  # refused as a key later (``typed.build``), or hashed by PyYAML
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    problem=f"key {key!r} given twice", problem_mark=key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _not_utf8(exc: UnicodeDecodeError) -> str:
    return f"byte 0x{exc.object[exc.start]:02x} at position {exc.start}"


def _validated(config: Config | None, problems: list[str], source: str) -> Config:
    if config is not None:  # the rules run over what was right, whatever else was not
        config = _read_secrets(config, problems)
        problems.extend(_check(config))
    if problems or config is None:
        raise ConfigError(first_per_path(problems) or ["empty configuration"], source)
    return config


def _secret_from_file(section: object, key: str) -> bool:
    """A secret read from its ``*_file`` (``validate`` reads it again)."""
    return bool(getattr(section, SECRET_FILES.get(key, ""), ""))


SECRET_FILES = {"sasl_password": "sasl_password_file", "ssl_key_password": "ssl_key_password_file"}


def _read_secrets(config: Config, problems: list[str]) -> Config:
    """Secrets given as ``*_file`` read into their fields (the file's path stays)."""

    def read(cluster: ClusterConfig, where: str) -> ClusterConfig:
        changes: dict[str, Any] = {}
        for secret, file_key in SECRET_FILES.items():
            path = getattr(cluster, file_key)
            if not path:
                continue
            if getattr(cluster, secret):
                problems.append(f"{where}.{secret}: set it or {file_key}, not both")
                continue
            try:
                changes[secret] = Path(path).read_text(encoding="utf-8").removesuffix("\n")
            except OSError as exc:
                problems.append(f"{where}.{file_key}: cannot read {path}: {exc.strerror}")
            except UnicodeDecodeError as exc:
                problems.append(f"{where}.{file_key}: {path} is not UTF-8 text: {_not_utf8(exc)}")
        return dataclasses.replace(cluster, **changes) if changes else cluster

    local = read(config.local, "local")
    remotes = tuple(read(r, f"remotes[{i}]") for i, r in enumerate(config.remotes))
    return dataclasses.replace(config, local=local, remotes=remotes)


def _check(config: Config) -> list[str]:
    """Rules that span fields."""
    return [
        *_check_names(config),
        *_check_remotes(config),
        *_check_topics(config.topics),
        *_check_copier(config.copier),
        *_check_coordination(config.coordination),
        *_check_http(config.http),
        *_check_groups(config.groups),
    ]


def _check_names(config: Config) -> list[str]:
    problems = []
    if not config.name.strip():
        problems.append("name: required, got an empty value")
    if not TOPIC_NAME.fullmatch(config.state_topic) or config.state_topic in (".", ".."):
        problems.append(
            f"state_topic: not a Kafka topic name (letters, digits, '.', '_', '-';"
            f" at most 249), got {config.state_topic!r}"
        )
    return problems


def _check_patterns(section: object, where: str, keys: tuple[str, ...]) -> list[str]:
    """Every regex of ``section``'s pattern lists compiles."""
    problems = []
    for key in keys:
        for i, pattern in enumerate(getattr(section, key)):
            try:
                re.compile(pattern)
            except re.error as exc:
                problems.append(f"{where}.{key}[{i}]: invalid regex {pattern!r}: {exc}")
    return problems


def _check_groups(groups: GroupsConfig) -> list[str]:
    problems = _check_patterns(groups, "groups", ("include", "exclude"))
    if groups.interval_s <= 0:
        problems.append("groups.interval_s: must be positive")
    return problems


def _check_http(http: HttpConfig) -> list[str]:
    if not http.listen:
        return []
    _host, colon, port = http.listen.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        return [f'http.listen: expected host:port (or "" for off), got {http.listen!r}']
    return []


def _check_coordination(group: CoordinationConfig) -> list[str]:
    problems = []
    if group.instance_id and not group.group:
        problems.append("coordination.instance_id: needs coordination.group")
    if not 0 < group.heartbeat_interval_ms < group.session_timeout_ms:
        problems.append("coordination.heartbeat_interval_ms: must be below session_timeout_ms")
    if not group.heartbeat_interval_ms < group.lease_ms < group.session_timeout_ms:
        problems.append(
            "coordination.lease_ms: must lie between heartbeat_interval_ms and session_timeout_ms"
        )
    return problems


def _check_remotes(config: Config) -> list[str]:
    problems = []
    if not config.remotes:
        problems.append("remotes: at least one remote is required")
    seen: set[str] = set()
    for i, remote in enumerate(config.remotes):
        if not remote.name.strip():
            problems.append(f"remotes[{i}].name: required")
        elif remote.name in seen:
            problems.append(f"remotes[{i}].name: duplicate remote name {remote.name!r}")
        seen.add(remote.name)
        if _servers(remote.bootstrap_servers) & _servers(config.local.bootstrap_servers):
            problems.append(f"remotes[{i}].bootstrap_servers: is the local cluster")
        problems.extend(_check_cluster(remote, f"remotes[{i}]"))
    problems.extend(_check_cluster(config.local, "local"))
    if config.local.connections != 1:
        problems.append("local.connections: lanes are for remotes; the local cluster uses 1")
    if config.local.client_rack is not None:
        problems.append("local.client_rack: only remotes are read from nearby replicas")
    if config.local.max_bytes_per_second:
        problems.append("local.max_bytes_per_second: caps are for remotes (or the copier)")
    return problems


def _check_cluster(cluster: ClusterConfig, where: str) -> list[str]:
    problems = _check_servers(cluster.bootstrap_servers, f"{where}.bootstrap_servers")
    for name in ("request_timeout_ms", "metadata_max_age_ms"):
        if not 0 < getattr(cluster, name) <= MAX_INT32:
            problems.append(f"{where}.{name}: must be positive (at most {MAX_INT32})")
    if not 1 <= cluster.connections <= MAX_LANES:
        problems.append(f"{where}.connections: must be 1..{MAX_LANES}")
    for name in ("socket_receive_buffer_bytes", "socket_send_buffer_bytes"):
        value = getattr(cluster, name)
        if value == 0 or value < -1:
            problems.append(f"{where}.{name}: must be positive, or -1 for the OS default")
    for name in ("fetch_max_bytes", "partition_fetch_max_bytes"):
        if not 0 <= getattr(cluster, name) <= MAX_INT32:
            problems.append(
                f"{where}.{name}: must be positive (at most {MAX_INT32}), or 0 for the copier's"
            )
    if cluster.max_bytes_per_second < 0:
        problems.append(f"{where}.max_bytes_per_second: must be positive, or 0 for no cap")
    rack = cluster.client_rack
    if rack is not None and (not isinstance(rack, str) or not rack.strip()):
        problems.append(f"{where}.client_rack: a rack name, or leave it out to read from leaders")
    return problems + check_security(cluster, where)


def _check_servers(servers: str, where: str) -> list[str]:
    """``host[:port][,host[:port]...]`` (no port: 9092, as aiokafka takes it), every port
    a number 1..65535."""
    if not servers:
        return []  # a required value left empty: said already
    for server in (s.strip() for s in servers.split(",")):
        host, port = _host_port(server)
        if not host or any(c.isspace() for c in server) or port == "":
            return [f"{where}: expected host:port[,host:port...], got {servers!r}"]
        if port is not None and (not port.isdigit() or not 1 <= int(port) <= 65535):
            return [f"{where}: port must be a number 1..65535, got {server!r}"]
    return []


def _host_port(server: str) -> tuple[str, str | None]:
    """(host, port) of ``host:port``, ``[v6]:port``, ``host`` (port None) or a bare IPv6
    address (port None); port "" where a colon ends it."""
    if server.startswith("["):
        host, _, rest = server[1:].partition("]")
        return host, (rest[1:] if rest.startswith(":") else None if not rest else "")
    if server.count(":") == 1:
        host, _, port = server.partition(":")
        return host, port
    return server, None


def _check_topics(topics: TopicsConfig) -> list[str]:
    problems = []
    if not topics.include:
        problems.append("topics.include: at least one pattern is required")
    if topics.refresh_interval_s <= 0:
        problems.append("topics.refresh_interval_s: must be positive")
    if not -1 <= topics.replication_factor <= 32767:
        problems.append(
            "topics.replication_factor: must be 1..32767, or -1 (or 0) for the cluster's"
        )
    problems += _check_patterns(topics, "topics", ("include", "exclude", "fill"))
    return problems


def _check_copier(copier: CopierConfig) -> list[str]:
    problems = [
        f"copier.{name}: must be positive (at most {MAX_INT32})"
        for name in ("fetch_max_bytes", "partition_fetch_max_bytes", "chunk_timeout_ms")
        if not 0 < getattr(copier, name) <= MAX_INT32
    ]
    if copier.buffer_bytes <= 0:
        problems.append("copier.buffer_bytes: must be positive")
    if not 0 <= copier.fetch_max_wait_ms <= MAX_INT32:
        problems.append("copier.fetch_max_wait_ms: must be 0 or more")
    if copier.retry_backoff_ms <= 0:
        problems.append("copier.retry_backoff_ms: must be positive")
    elif copier.retry_backoff_max_ms < copier.retry_backoff_ms:
        problems.append("copier.retry_backoff_max_ms: must be at least retry_backoff_ms")
    if copier.shutdown_timeout_s < 0:
        problems.append("copier.shutdown_timeout_s: must be 0 or more")
    if copier.max_bytes_per_second < 0:
        problems.append("copier.max_bytes_per_second: must be positive, or 0 for no cap")
    if copier.max_chunks < 1:
        problems.append("copier.max_chunks: must be positive")
    if copier.chunk_timeout_ms <= copier.fetch_max_wait_ms:
        problems.append("copier.chunk_timeout_ms: must be above fetch_max_wait_ms")
    if not 1 <= copier.max_in_flight <= 5:
        problems.append("copier.max_in_flight: must be 1..5 (the broker dedupes 5 batches)")
    if not 0 <= copier.coalesce_bytes <= COALESCE_MAX_BYTES:
        problems.append(
            f"copier.coalesce_bytes: must be 0 (off) up to {COALESCE_MAX_BYTES}"
            " (a broker's default max.message.bytes is about 1 MiB)"
        )
    return problems


def _servers(bootstrap: str) -> set[str]:
    return {s.strip().replace("localhost", "127.0.0.1") for s in bootstrap.split(",") if s}
