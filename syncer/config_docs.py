"""What every configuration key means, kept next to the config classes (``syncer.config``)
so the reference page (``syncer config reference``) and the JSON Schema's descriptions
(``syncer config schema``) are made from one text: a key added to a class without its
meaning here, or a meaning left here for a key that is gone, fails the unit tests.

Keyed by class and field name, as the generator walks the classes: ``ClusterConfig`` serves
``local`` and every item of ``remotes``, so what matters for remotes only says so. Markdown."""

from __future__ import annotations

from syncer.config import (
    ClusterConfig,
    Config,
    CoordinationConfig,
    CopierConfig,
    GroupsConfig,
    HttpConfig,
    TopicsConfig,
)

Meanings = dict[type, dict[str, str]]

# one line in the page (a shell prints it so), cut here for the source's line length
INTRO = """\
Every key of the YAML file, by section: its type, its default, what it does. `${VAR}` and
`${VAR:-default}` are read from the environment in every string. Every problem in a file is
reported at once, on one line, with exit code 3
([configuration](configuration.md#problems-in-a-file)); `syncer config schema` gives editors
the same keys with these meanings as descriptions.
"""

# said under a section's heading, after its class's docstring
NOTES: dict[type, str] = {
    ClusterConfig: (
        "Each key is set under `local` (the cluster written to) and under every item of"
        " `remotes` (the clusters read from); keys marked *remotes only* are refused or"
        " unused under `local`."
    ),
}

_CLUSTER = {
    "bootstrap_servers": (
        "`host:port` of the cluster's brokers, comma-separated. `local`: the cluster written"
        " to; a remote: a cluster read from, which must not be the local one (the same"
        " addresses are refused as the file is read; the local cluster under another address"
        " by its cluster id and topic ids, Kafka 2.8+, as the clusters are opened: exit 3)"
    ),
    "name": (
        "remotes: **required**, unique; the name shown in logs and status. `local`: optional"
        " (shown as `local` when empty). Also appended to `client_id`"
    ),
    "client_id": (
        "client id sent to the brokers, followed by `-<name>` (and `-lane<n>` for the"
        " extra lanes of a remote)"
    ),
    "request_timeout_ms": "client request timeout, in milliseconds",
    "metadata_max_age_ms": (
        "milliseconds after which the client refreshes its metadata (and a follower chosen"
        " by `client_rack` is given up: the leader chooses again)"
    ),
    "connections": (
        "*remotes only*: lanes, independent clients (each with its own TCP connections) read"
        " in parallel, 1–64; `local` must leave it at 1"
    ),
    "socket_receive_buffer_bytes": (
        "SO_RCVBUF of every connection (`local` and remotes), in bytes; -1 = the OS's"
        " (auto-tuned) default; 0 and below -1 are refused"
    ),
    "socket_send_buffer_bytes": (
        "SO_SNDBUF of every connection (`local` and remotes), in bytes; -1 = the OS's"
        " (auto-tuned) default; 0 and below -1 are refused"
    ),
    "fetch_max_bytes": (
        "*remotes only*: this remote's bytes per fetch request; 0 = the copier's"
        " (`copier.fetch_max_bytes`)"
    ),
    "partition_fetch_max_bytes": (
        "*remotes only*: this remote's bytes per partition per fetch; 0 = the copier's"
        " (`copier.partition_fetch_max_bytes`)"
    ),
    "max_bytes_per_second": (
        "*remotes only*: bandwidth cap, record bytes per second this process fetches from"
        " the remote, over all its lanes (0 = none);"
        " see [bandwidth caps](copying.md#bandwidth-caps)"
    ),
    "client_rack": (
        "*remotes only*: syncer's rack (availability zone) at this remote, or leave it out"
        " to read from leaders (an empty name is refused). Fetches carry it, and a leader"
        " whose brokers set"
        " `replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector`"
        " names an in-sync follower in that rack to read from (KIP-392; Kafka 2.4+), which"
        " saves cross-zone traffic. The follower is used until `metadata_max_age_ms` has"
        " passed (then the leader chooses again); a follower that fails or answers an error"
        " sends the partition back to its leader, without the rack, for 30 s. Bytes fetched"
        " per broker: `syncer_remote_fetched_bytes_total{remote,node}`. `verify` reads from"
        " leaders"
    ),
    "security_protocol": "`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`",
    "ssl_cafile": (
        "the CA that signed the brokers' certificates (\"\" = the system's); needs"
        " `security_protocol` `SSL` or `SASL_SSL`; the file must exist"
    ),
    "ssl_certfile": (
        "client certificate (mutual TLS, for brokers that ask for one); give it and"
        " `ssl_keyfile` both or neither; needs `SSL` or `SASL_SSL`"
    ),
    "ssl_keyfile": (
        "the client certificate's key; give it and `ssl_certfile` both or neither; needs"
        " `SSL` or `SASL_SSL`"
    ),
    "ssl_key_password": "the client key's password (or `ssl_key_password_file`, not both)",
    "ssl_key_password_file": (
        "a file holding the client key's password, read at load (one trailing newline"
        " dropped); not together with `ssl_key_password`"
    ),
    "ssl_check_hostname": "verify the broker's name against its certificate",
    "sasl_mechanism": (
        "`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` or `OAUTHBEARER` (its token provider is"
        " set from Python: `ClusterConfig.sasl_oauth_token_provider`); needs"
        " `security_protocol` `SASL_PLAINTEXT` or `SASL_SSL`"
    ),
    "sasl_username": (
        "SASL user name; `PLAIN` and `SCRAM-*` need it and a password. `${ENV}` references"
        " work in every value"
    ),
    "sasl_password": "SASL password (or `sasl_password_file`, not both)",
    "sasl_password_file": (
        "a file holding the SASL password, read at load (one trailing newline dropped); not"
        " together with `sasl_password`"
    ),
}

_TOPICS = {
    "include": (
        "**required**: regexes (full match) of topics to mirror; at least one. Kafka's"
        " internal `__*` topics are never mirrored"
    ),
    "exclude": "regexes of topics to leave out; `__*` internal topics are always left out",
    "create_missing": (
        "create missing local topics with the remote's partition count; grow a mirrored"
        " topic whose remote gained partitions"
    ),
    "copy_configs": (
        "topic configs copied when creating a local topic, and kept in sync after"
        " (`sync_configs`). A local topic is always created with"
        " `message.timestamp.type=CreateTime`: see [how it stays exact](exactness.md)"
    ),
    "replication_factor": (
        "for created topics; -1 = the local broker's `default.replication.factor`"
    ),
    "on_hole": (
        "what a hole in the source (compaction gap, transaction marker, aborted data) does:"
        " `halt` the partition, or `fill` it with filler records at the same offsets"
    ),
    "fill": "regexes: topics whose holes are filled whatever `on_hole` says",
    "align_start": (
        "a new, empty local partition whose remotes start above 0 gets fillers up to that"
        " start, then DeleteRecords: local start and end equal the remote's (otherwise that"
        " is data lost at the source: the partition halts)"
    ),
    "refresh_interval_s": (
        "seconds: how often the daemon looks for new topics and partitions (and syncs their"
        " settings)"
    ),
    "sync_configs": (
        "keep the `copy_configs` keys of every mirrored local topic equal to the first"
        " remote that has the topic, on every refresh and once in catch-up"
        " (IncrementalAlterConfigs): a key the remote sets on the topic is set locally, one it"
        " no longer sets is deleted locally (back to the local default). The timestamp type"
        " is never synced; fidelity settings (cleanup.policy, max.message.bytes,"
        " compression.type) only when the remote changed them (a local change is refused as"
        " before); max.message.bytes is never lowered, compression.type never becomes a"
        " codec, and cleanup.policy starts compacting only once the copy has caught up"
        " (the remote's earlier records may have no key). A record refused as too large"
        " makes its topic follow the remote at once, then is sent again or halts. `false`:"
        " settings are copied only when syncer creates a topic"
    ),
}

_COPIER = {
    "fetch_max_bytes": (
        "bytes per fetch request (two data requests are in flight per broker connection);"
        " must be positive"
    ),
    "partition_fetch_max_bytes": (
        "bytes per partition per fetch (and the size of a chunk); must be positive"
    ),
    "fetch_max_wait_ms": "long-poll wait when caught up, in milliseconds",
    "max_in_flight": (
        "produce requests in flight per partition, 1–5 (the broker dedupes 5); the writer"
        " also keeps at most this many requests in flight on each of its 8 connections to a"
        " local broker (each partition writes on one of them)"
    ),
    "coalesce_bytes": (
        "small uncompressed CreateTime batches (up to 8 KiB each) that come in one fetch answer"
        " are written as one batch of up to this many bytes: each record keeps its offset,"
        " timestamp, key, value and headers, and a source that sends a record per batch"
        " needs a produce request per few dozen records, not per record. 0 writes every"
        " source batch as it is; at most 1 MiB. A local topic that refuses such a batch as"
        " too large has its batches written one by one from then on"
    ),
    "max_chunks": (
        "chunks of one partition fetched (from any remotes that hold them) or waiting to be"
        " written in order (the reorder buffer); at least 1"
    ),
    "buffer_bytes": (
        "bytes fetched and not yet written (or written and not yet answered), for the whole"
        " process; new fetches wait while it is full (the one each partition's next write"
        " needs still goes out). Raise it for a fast link with a long round trip: it bounds"
        " the bytes in flight (bandwidth × delay). Must be positive"
    ),
    "chunk_timeout_ms": (
        "a fetch request slower than this (from when it is sent) fails and counts against"
        " its remote; milliseconds, above `fetch_max_wait_ms`"
    ),
    "retry_backoff_ms": "first backoff after a transient error, in milliseconds",
    "retry_backoff_max_ms": "longest backoff after repeated transient errors, in milliseconds",
    "shutdown_timeout_s": "seconds: bound on draining writes at shutdown",
    "max_bytes_per_second": (
        "bandwidth cap on all remotes together, record bytes per second, for this process"
        " (0 = none)"
    ),
}

_COORDINATION = {
    "group": (
        "consumer group on the local cluster shared by the processes of a deployment; empty"
        " = one process owns everything"
    ),
    "instance_id": (
        "static membership (`group.instance.id`): a restart within the session timeout keeps"
        " its partitions; needs `group`; one per process: a second running process with the"
        " same id takes the other's place, and the one replaced drains and exits 3"
    ),
    "session_timeout_ms": "a member silent this long (milliseconds) loses its partitions",
    "heartbeat_interval_ms": "heartbeat period, in milliseconds; below `session_timeout_ms`",
    "lease_ms": (
        "stop writing after this long (milliseconds) without an answered heartbeat; must lie"
        " between `heartbeat_interval_ms` and `session_timeout_ms`"
    ),
}

_HTTP = {
    "listen": (
        "`host:port` where `syncer run` serves /metrics (Prometheus) /status (JSON) /healthz"
        ' /readyz; `""` = off, port 0 = any free port (logged)'
    ),
}

_GROUPS = {
    "include": (
        "consumer groups (regexes, full match) whose committed offsets are copied from the"
        " remotes to local, unchanged; none by default"
    ),
    "exclude": "regexes of consumer groups to leave out of `include`",
    "interval_s": (
        "seconds, positive: how often `syncer run` copies them (`catch-up` does once, at the end)"
    ),
}

MEANINGS: Meanings = {
    Config: {
        "local": "the cluster written to: the keys of `local` and `remotes[]` below",
        "remotes": (
            "the clusters read from, at least one; each item takes the keys of `local` and"
            " `remotes[]` below (`name` required)"
        ),
        "topics": "which topics to mirror: the keys of `topics` below (`include` required)",
        "copier": "sizes and pacing of the data path: the keys of `copier` below",
        "coordination": "processes sharing the partitions: the keys of `coordination` below",
        "http": "the daemon's HTTP endpoint: the keys of `http` below",
        "groups": "consumer group offsets to copy: the keys of `groups` below",
        "name": (
            "deployment name; the key of the writer identity in the state topic. Every member"
            " of a `coordination.group` needs the same one (and the same `state_topic`): a"
            " member with another gets no partition and exits 3"
        ),
        "state_topic": "small local topic holding the deployment's producer id; never"
        " mirrored, whatever topics.include selects (a remote that is another deployment's"
        " local cluster holds one of the same name)",
    },
    ClusterConfig: _CLUSTER,
    TopicsConfig: _TOPICS,
    CopierConfig: _COPIER,
    CoordinationConfig: _COORDINATION,
    HttpConfig: _HTTP,
    GroupsConfig: _GROUPS,
}


def meaning(cls: type, name: str, meanings: Meanings = MEANINGS) -> str | None:
    """The meaning of ``cls``'s key ``name``, or None when it has none (a test fails)."""
    return meanings.get(cls, {}).get(name)
