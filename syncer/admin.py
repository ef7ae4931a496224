"""The admin side of a cluster, through one aiokafka admin client opened when first needed:
topics (create, grow, settings), broker settings, consumer groups (list, describe, commit
offsets) and deleting records."""

from __future__ import annotations

import contextlib
import random
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.admin.records_to_delete import RecordsToDelete
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
from aiokafka.protocol.commit import OffsetCommitRequest

from syncer.connection import TP, ClusterConnection, client_options, error_for
from syncer.errors import ClusterError, TransientClusterError
from syncer.protocol.common import NO_ID
from syncer.protocol.configs import AlterTopicConfigsRequest, alter_errors
from syncer.protocol.metadata import TopicCensusRequest, TopicMetadata
from syncer.retry import retried

CREATE_BATCH = 100  # topics per CreateTopics request
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs' config_source of a value set on the topic itself


@dataclass(frozen=True, slots=True)
class TopicSetting:
    """One setting of a topic as DescribeConfigs reports it: its effective ``value``,
    whether it is ``explicit`` (set on the topic itself, config_source DYNAMIC_TOPIC_CONFIG;
    else inherited from the broker's settings or Kafka's default), and the ``default`` it
    would have without the topic's own value (the first synonym of another source, in the
    broker's order of precedence; None: not reported)."""

    value: str | None
    explicit: bool
    default: str | None = None

    @classmethod
    def of(
        cls, value: str | None, source: int, synonyms: Iterable[tuple[Any, ...]]
    ) -> TopicSetting:
        if source != DYNAMIC_TOPIC_CONFIG:
            return cls(value, False, value)
        inherited = [s[1] for s in synonyms if s[2] != DYNAMIC_TOPIC_CONFIG]
        return cls(value, True, inherited[0] if inherited else None)


@dataclass(frozen=True, slots=True)
class Census:
    """Every topic of a cluster: its partition count, and its id (``ids`` None: the
    cluster's brokers report no topic ids, Kafka before 2.8)."""

    counts: dict[str, int]
    ids: dict[str, uuid.UUID] | None

    def ids_of(self, topics: Collection[str]) -> dict[str, uuid.UUID] | None:
        """The ids of those of ``topics`` the cluster holds (what ``topic_ids`` answers)."""
        if self.ids is None:
            return None
        return {t: self.ids[t] for t in topics if t in self.ids}


def census(topics: Mapping[str, TopicMetadata]) -> Census:
    """The census of a metadata answer. A topic answered with an error (not led yet, being
    deleted) is left out, as aiokafka's metadata leaves it out of the counts."""
    counts = {name: found.partitions for name, found in topics.items() if found.error_code == 0}
    ids = {
        name: found.topic_id
        for name, found in topics.items()
        if found.error_code == 0 and found.topic_id != NO_ID
    }
    return Census(counts, ids)


# NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS: ask again
COORDINATOR_ERRORS = {14, 15, 16}


@contextlib.contextmanager
def _admin_errors(what: str) -> Iterator[None]:
    try:
        yield
    except (kafka_errors.KafkaError, OSError) as exc:
        raise TransientClusterError(f"{what}: {exc!r}") from exc


def _failed(message: str, exc: BaseException) -> ClusterError:
    """``message`` as the error a caller acts on: transient (tried again) where the cause is
    (a connection lost or refused, a node not ready, a timeout: a cluster that comes back),
    else a ClusterError."""
    transient = isinstance(exc, OSError) or bool(getattr(exc, "retriable", False))
    return (TransientClusterError if transient else ClusterError)(message)


class TopicAdmin(ClusterConnection):
    """Topic, broker-setting and consumer-group administration of one cluster."""

    _admin: AIOKafkaAdminClient | None = None  # opened by the first admin call
    # set on the local cluster by ``MirroredTopics`` when topics.sync_configs is on
    limit_follower: Callable[[str], Awaitable[int | None]] | None = None

    async def followed_limit(self, topic: str) -> int | None:
        """The local ``topic``'s max.message.bytes once its copied settings followed its
        remote's now (None: they do not follow, or it is not known)."""
        if self.limit_follower is None:
            return None
        return await self.limit_follower(topic)

    async def stop(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            await admin.close()
        await super().stop()

    async def _admin_client(self) -> AIOKafkaAdminClient:
        if self._admin is None:
            admin = AIOKafkaAdminClient(
                bootstrap_servers=self.config.bootstrap_servers,
                client_id=f"{self.config.client_id}-{self.name}-admin",
                request_timeout_ms=self.config.request_timeout_ms,
                **client_options(self.config),
            )
            try:
                with _admin_errors(f"{self.name}: connecting the admin client"):
                    await admin.start()
            except TransientClusterError:
                await admin.close()
                raise
            self._admin = admin
        return self._admin

    # the census of topics -------------------------------------------------------------

    async def topic_census(self) -> Census:
        """Every topic's partition count and id, in one Metadata v10 request decoded only
        that far (``TopicCensus``): a topic refresh asks this once per cluster instead of a
        full metadata read for the counts and another for the ids. A broker before Kafka
        2.8 answers no v10: the counts then come from a full read, and no ids. Not retried
        here: a refresh that fails is tried again at the next (as the reads it replaces)."""
        brokers = [b.nodeId for b in self._client.cluster.brokers()]
        failures = []
        for node in brokers:
            try:
                answer = await self._client.send(node, TopicCensusRequest())
            except NotImplementedError:
                return Census(await self.partition_counts(), None)
            except (kafka_errors.KafkaError, OSError, TimeoutError) as exc:
                failures.append(f"node {node}: {type(exc).__name__}")
                continue
            if answer.brokers:  # a broker still starting may know of none
                return census(answer.topics)
            failures.append(f"node {node}: no brokers in its answer")
        if not brokers:  # none known yet: the bootstrap servers, through a full read
            await self.refresh_metadata()
            if self._client.cluster.brokers():
                return await self.topic_census()
        raise TransientClusterError(f"{self.name}: topic census: no answer from {failures}")

    # consumer groups -----------------------------------------------------------------

    async def consumer_groups(self) -> list[str]:
        return await retried(self._consumer_groups, what=f"{self.name}: listing groups")

    async def committed(self, group: str) -> dict[TP, int]:
        """The group's committed offsets (partitions it never committed are absent)."""
        return {tp: offset for tp, (offset, _metadata) in (await self.commits(group)).items()}

    async def commits(self, group: str) -> dict[TP, tuple[int, str]]:
        """The group's committed offsets, each with the metadata string committed with it
        (Kafka Streams keeps a partition's stream time there)."""
        return await retried(
            partial(self._committed, group), what=f"{self.name}: offsets of {group}"
        )

    async def group_state(self, group: str) -> str:
        """Empty, Dead (no such group), Stable, PreparingRebalance, CompletingRebalance..."""
        return await retried(
            partial(self._group_state, group), what=f"{self.name}: describing {group}"
        )

    async def group_user_data(self, group: str) -> tuple[str, dict[str, bytes]]:
        """``group``'s state and each member → the user data of its JoinGroup metadata (a
        consumer protocol's; empty for a member of another protocol, and for every member
        while the group rebalances: Kafka tells the metadata of a stable group only)."""
        return await retried(
            partial(self._group_user_data, group), what=f"{self.name}: describing {group}"
        )

    async def commit_offsets(
        self, group: str, offsets: Mapping[TP, int], metadata: Mapping[TP, str] | None = None
    ) -> dict[TP, int]:
        """Commit ``offsets`` for ``group`` as a client outside it (generation -1), with no
        leader epoch, each with its ``metadata`` string (none: empty): the broker refuses it
        while the group has members. Error code per partition (0: committed)."""
        return await retried(
            partial(self._commit_offsets, group, offsets, metadata or {}),
            what=f"{self.name}: committing for {group}",
        )

    async def _consumer_groups(self) -> list[str]:
        with _admin_errors(f"{self.name}: listing groups"):
            admin = await self._admin_client()
            return sorted(str(g[0]) for g in await admin.list_consumer_groups())

    async def _committed(self, group: str) -> dict[TP, tuple[int, str]]:
        with _admin_errors(f"{self.name}: offsets of {group}"):
            admin = await self._admin_client()
            offsets = await admin.list_consumer_group_offsets(group)
        return {
            TP(tp.topic, tp.partition): (m.offset, m.metadata or "")
            for tp, m in offsets.items()
            if m.offset >= 0
        }

    async def _group_described(self, group: str) -> Any:
        """DescribeGroups' answer for ``group``: (error, id, state, protocol type, protocol,
        members)."""
        with _admin_errors(f"{self.name}: describing {group}"):
            admin = await self._admin_client()
            (response,) = await admin.describe_consumer_groups([group])
        (described,) = response.groups
        if described[0] in COORDINATOR_ERRORS:
            raise TransientClusterError(f"{self.name}: describing {group}: coordinator moving")
        if described[0]:
            raise error_for(described[0], f"{self.name}: describing {group}")
        return described

    async def _group_state(self, group: str) -> str:
        return str((await self._group_described(group))[2])

    async def _group_user_data(self, group: str) -> tuple[str, dict[str, bytes]]:
        described = await self._group_described(group)
        told: dict[str, bytes] = {}
        for member in described[5]:
            member_id, metadata = member[0], member[-2]  # v4 adds the instance id after the id
            try:
                told[str(member_id)] = ConsumerProtocolMemberMetadata.decode(metadata).user_data
            except Exception:  # a member of another protocol tells nothing
                told[str(member_id)] = b""
        return str(described[2]), told

    async def _commit_offsets(
        self, group: str, offsets: Mapping[TP, int], metadata: Mapping[TP, str]
    ) -> dict[TP, int]:
        topics: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
        for tp, offset in offsets.items():
            topics[tp.topic].append((tp.partition, offset, metadata.get(tp, "")))
        with _admin_errors(f"{self.name}: committing for {group}"):
            admin = await self._admin_client()
            node = await admin.find_coordinator(group)
            request = OffsetCommitRequest(group, -1, "", -1, list(topics.items()))
            response = await admin._send_request(request, node)
        codes = {
            TP(topic, partition): code
            for topic, partitions in response.topics
            for partition, code in partitions
        }
        if COORDINATOR_ERRORS & set(codes.values()):
            raise TransientClusterError(f"{self.name}: committing for {group}: coordinator moving")
        return codes

    async def delete_records(self, tp: TP, before: int) -> int:
        """Delete ``tp``'s records below ``before``; the partition's new start."""

        async def delete() -> int:
            with _admin_errors(f"{self.name}: deleting records of {tp}"):
                admin = await self._admin_client()
                starts = await admin.delete_records({tp: RecordsToDelete(before)})
            return int(starts[tp])

        return await retried(delete, what=f"{self.name}: deleting records of {tp}")

    async def topic_configs(self, topic: str, keys: Iterable[str]) -> dict[str, str]:
        """The topic's explicitly set (non-default) values among ``keys``."""
        admin = await self._admin_client()
        wanted = set(keys)
        result = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        out: dict[str, str] = {}
        for response in result:
            for resource in response.resources:
                for entry in resource[4]:
                    name, value, _read_only, source = entry[0], entry[1], entry[2], entry[3]
                    if name in wanted and value is not None and source == 1:  # DYNAMIC_TOPIC_CONFIG
                        out[name] = value
        return out

    async def topic_settings(
        self, topics: Collection[str], keys: Collection[str]
    ) -> dict[str, dict[str, str]]:
        """Each topic's effective values of ``keys``: set on the topic or inherited from the
        broker (DescribeConfigs answers both). A topic that does not exist is absent."""
        if not topics:
            return {}
        return await retried(
            partial(self._topic_settings, sorted(topics), sorted(keys)),
            what=f"{self.name}: settings of {len(topics)} topics",
        )

    async def _topic_settings(
        self, topics: list[str], keys: list[str]
    ) -> dict[str, dict[str, str]]:
        described = await self._described(topics, keys, synonyms=False)
        return {
            t: {e[0]: e[1] for e in entries if e[1] is not None} for t, entries in described.items()
        }

    async def topic_setting_sources(
        self, topics: Collection[str], keys: Collection[str]
    ) -> dict[str, dict[str, TopicSetting]]:
        """Each topic's ``keys`` with where their values come from (``TopicSetting``). A
        topic that does not exist is absent."""
        if not topics:
            return {}

        async def describe() -> dict[str, dict[str, TopicSetting]]:
            described = await self._described(sorted(topics), sorted(keys), synonyms=True)
            return {
                topic: {e[0]: TopicSetting.of(e[1], e[3], e[5]) for e in entries}
                for topic, entries in described.items()
            }

        return await retried(describe, what=f"{self.name}: settings of {len(topics)} topics")

    async def _described(
        self, topics: list[str], keys: list[str], *, synonyms: bool
    ) -> dict[str, list[tuple[Any, ...]]]:
        """DescribeConfigs' entries of each topic, for ``keys``."""
        wanted = {key: None for key in keys}  # the keys filter what the broker answers
        resources = [ConfigResource(ConfigResourceType.TOPIC, t, wanted) for t in topics]
        with _admin_errors(f"{self.name}: describing topic settings"):
            admin = await self._admin_client()
            responses = await admin.describe_configs(resources, include_synonyms=synonyms)
        out: dict[str, list[tuple[Any, ...]]] = {}
        for response in responses:
            for code, _message, _type, topic, entries in response.resources:
                if code == kafka_errors.UnknownTopicOrPartitionError.errno:
                    continue
                if code:
                    raise error_for(code, f"{self.name}: settings of topic {topic}")
                out[topic] = list(entries)
        return out

    async def alter_topic_configs(
        self, topic: str, set: Mapping[str, str], delete: tuple[str, ...]
    ) -> None:
        """Set ``set`` and delete ``delete`` on ``topic`` with IncrementalAlterConfigs: its
        other settings stay as they are."""

        async def alter() -> None:
            with _admin_errors(f"{self.name}: altering the settings of {topic}"):
                admin = await self._admin_client()
                response = await admin._send_request(AlterTopicConfigsRequest(topic, set, delete))
            for code, message in alter_errors(response):
                raise error_for(code, f"{self.name}: altering the settings of {topic}: {message}")

        await retried(alter, what=f"{self.name}: altering the settings of {topic}")

    async def create_topic(
        self, topic: str, partitions: int, configs: dict[str, str], replication_factor: int
    ) -> None:
        refused = await self.create_topics([(topic, partitions, configs)], replication_factor)
        if refused:
            raise ClusterError(f"{self.name}: creating topic {topic!r} failed: {refused[topic]}")

    async def create_topics(
        self, topics: Sequence[tuple[str, int, dict[str, str]]], replication_factor: int
    ) -> dict[str, str]:
        """Create each (name, partitions, settings), CREATE_BATCH topics per request: at
        thousands of partitions, one request per topic is most of a start-up. A topic that
        exists already is no error. The topics the cluster refuses for good (a creation
        policy, a setting or replication factor it does not take, no permission): name →
        why, the others created; one refused for now (no controller, a timeout) raises a
        ``TransientClusterError``."""
        try:
            admin = await self._admin_client()
            if replication_factor < 1:
                replication_factor = await self._default_replication_factor()
        except (kafka_errors.KafkaError, OSError) as exc:
            raise _failed(f"{self.name}: creating topics failed: {exc!r}", exc) from exc
        refused: dict[str, str] = {}
        for i in range(0, len(topics), CREATE_BATCH):
            batch = [
                NewTopic(topic, partitions, replication_factor, topic_configs=configs)
                for topic, partitions, configs in topics[i : i + CREATE_BATCH]
            ]
            names = ", ".join(repr(t.name) for t in batch[:3]) + ("…" if len(batch) > 3 else "")
            try:
                response = await admin.create_topics(batch)
            except (kafka_errors.KafkaError, OSError) as exc:
                message = f"{self.name}: creating topics {names} failed: {exc}"
                raise _failed(message, exc) from exc
            for name, code, *rest in response.topic_errors:
                if code and code != kafka_errors.TopicAlreadyExistsError.errno:
                    kind = kafka_errors.for_code(code)
                    detail = rest[0] if rest and rest[0] else kind.__name__
                    if not kind.retriable:
                        refused[name] = f"{kind.__name__}: {detail}" if rest and rest[0] else detail
                        continue
                    message = f"{self.name}: creating topic {name!r} failed: {detail}"
                    raise _failed(message, kind())
        return refused

    async def add_partitions(self, topic: str, total: int) -> None:
        try:
            admin = await self._admin_client()
            await admin.create_partitions({topic: NewPartitions(total_count=total)})
        except (kafka_errors.KafkaError, OSError) as exc:
            message = f"{self.name}: growing {topic!r} to {total} partitions: {exc}"
            raise _failed(message, exc) from exc

    async def broker_settings(self, name: str) -> dict[int, str]:
        """Node id → the value of broker setting ``name`` on each broker of the cluster
        (whatever its source: default, static or dynamic)."""
        with _admin_errors(f"{self.name}: describing broker setting {name}"):
            admin = await self._admin_client()
            nodes = [b.nodeId for b in self._client.cluster.brokers()]
            resources = [ConfigResource(ConfigResourceType.BROKER, str(n)) for n in nodes]
            result = await admin.describe_configs(resources)
        out: dict[int, str] = {}
        for response in result:
            for res in response.resources:
                for entry in res[4]:
                    if entry[0] == name and entry[1] is not None:
                        out[int(res[3])] = str(entry[1])
        return out

    async def _default_replication_factor(self) -> int:
        """The brokers' ``default.replication.factor``, asked of each broker in turn until
        one answers: one hung, down or refusing among them fails no creation."""
        admin = await self._admin_client()
        nodes = [b.nodeId for b in self._client.cluster.brokers()]
        if not nodes:
            raise TransientClusterError(f"{self.name}: no broker known yet")
        random.shuffle(nodes)
        *others, last = nodes
        for node in others:
            try:
                return _replication_factor(await admin.describe_configs([_broker(node)]))
            except (kafka_errors.KafkaError, OSError, TimeoutError):
                continue
        return _replication_factor(await admin.describe_configs([_broker(last)]))


def _broker(node: int) -> ConfigResource:
    return ConfigResource(ConfigResourceType.BROKER, str(node))


def _replication_factor(described: Any) -> int:
    """``default.replication.factor`` from a DescribeConfigs answer of a broker (1 if it
    gives none); the broker's refusal (e.g. not authorized) raised as its error."""
    for response in described:
        for code, message, _type, _name, entries, *_rest in response.resources:
            if code:
                raise kafka_errors.for_code(code)(message)
            for entry in entries:
                if entry[0] == "default.replication.factor" and entry[1]:
                    return int(entry[1])
    return 1
