"""The request versions syncer cannot do without, and a cluster too old to give them.

aiokafka picks each request's version per connection from the broker's ApiVersions answer,
and syncer's own by-id requests (Fetch v13, Produce v13, Metadata v10) fall back to the
by-name ones where a broker lacks them. Below these floors there is no fallback: syncer reads
each fetched partition in Fetch v11's shape (it names the read replica, KIP-392), lists
read_committed ends (ListOffsets v2) and writes v2 record batches with their producer ids
(Produce v3, InitProducerId). A broker without them would fail mid-copy with a parse error;
it is refused at start instead, with one line."""

from __future__ import annotations

from collections.abc import Mapping

from aiokafka import AIOKafkaClient
from aiokafka import errors as kafka_errors
from aiokafka.protocol.admin import ApiVersionRequest

from syncer.errors import BrokerTooOld
from syncer.protocol.common import FETCH, PRODUCE

LIST_OFFSETS = 2
INIT_PRODUCER_ID = 22

# api key → (name, the oldest version syncer sends)
REQUIRED: dict[int, tuple[str, int]] = {
    PRODUCE: ("Produce", 3),
    FETCH: ("Fetch", 11),
    LIST_OFFSETS: ("ListOffsets", 2),
    INIT_PRODUCER_ID: ("InitProducerId", 0),
}

OLDEST_KAFKA = "2.3"  # the first release that answers Fetch v11

# the newest Fetch version of each old release: how a refusal names what it found
_FETCH_RELEASES = (
    (2, "0.10.0"),
    (3, "0.10.1–0.10.2"),
    (5, "0.11"),
    (6, "1.0"),
    (7, "1.1"),
    (8, "2.0"),
    (10, "2.1–2.2"),
)


def kafka_release(fetch_max: int) -> str:
    """The Kafka release(s) whose brokers answer Fetch up to ``fetch_max``, as far as syncer
    needs to tell them apart (2.3 and newer are all served)."""
    for version, release in _FETCH_RELEASES:
        if fetch_max <= version:
            return release
    return f"{OLDEST_KAFKA}+"


def too_old(versions: Mapping[int, tuple[int, int]]) -> str | None:
    """Why a broker with these ApiVersions (api key → (min, max)) cannot serve syncer, in a
    few words naming what it has and what is needed; None if it can."""
    lacking = []
    for key, (name, needed) in REQUIRED.items():
        _, high = versions.get(key, (-1, -1))
        if high < 0:
            lacking.append(f"no {name}")
        elif high < needed:
            lacking.append(f"{name} up to v{high}, needs v{needed}")
    if not lacking:
        return None
    fetch_max = versions.get(FETCH, (-1, -1))[1]
    found = f"Kafka {kafka_release(fetch_max)}" if fetch_max >= 0 else "not Kafka"
    return (
        f"its brokers are {found} ({'; '.join(lacking)}); syncer needs Kafka {OLDEST_KAFKA}"
        " or newer"
    )


async def refuse_if_too_old(client: AIOKafkaClient, where: str) -> None:
    """Raise ``BrokerTooOld`` (one line: ``where``, what was found, the minimum) if the
    bootstrapped ``client``'s brokers lack a request version syncer needs. One broker is
    asked: a cluster's brokers run one version but while it is upgraded. No answer is not a
    refusal: the requests that follow say what is wrong."""
    node = client.get_random_node()
    if node is None:
        return
    try:
        response = await client.send(node, ApiVersionRequest())
    except (kafka_errors.KafkaError, OSError, TimeoutError):
        return
    versions = {key: (low, high) for key, low, high, *_ in response.api_versions}
    why = too_old(versions)
    if why is not None:
        raise BrokerTooOld(f"{where}: {why}")


METADATA_KEY = 3
# newer releases, told by the first request version each brought (Kafka's *Request.json
# "validVersions" history): (api key, version, release), newest first
_NEWER_RELEASES = (
    (PRODUCE, 13, "4.1"),  # topic ids in Produce (KIP-516's last step)
    (FETCH, 13, "3.1"),  # topic ids in Fetch
    (LIST_OFFSETS, 7, "3.0"),  # MAX_TIMESTAMP (KIP-734)
    (METADATA_KEY, 10, "2.8"),  # topic ids in Metadata
)
# KIP-679 (Kafka 3.0): InitProducerId without a transactional id is allowed to a principal
# with IDEMPOTENT_WRITE on the cluster *or* WRITE on any topic (KafkaApis
# .handleInitProducerIdRequest: authorize(IDEMPOTENT_WRITE, CLUSTER) ||
# authorizeByResourceType(WRITE, TOPIC)); Produce itself asks only WRITE on the topic
WRITE_IMPLIES_IDEMPOTENT = "3.0"


def release_guess(versions: Mapping[int, tuple[int, int]]) -> str:
    """The oldest Kafka release whose brokers answer these ApiVersions, as ``"3.1+"``: a
    guess from the newest request versions, enough to tell what a cluster can do."""
    for key, version, release in _NEWER_RELEASES:
        if versions.get(key, (-1, -1))[1] >= version:
            return f"{release}+"
    return kafka_release(versions.get(FETCH, (-1, -1))[1])


def write_implies_idempotent(versions: Mapping[int, tuple[int, int]]) -> bool:
    """Does WRITE on a topic let this broker's principal allocate an idempotent producer id
    (Kafka 3.0+, told by ListOffsets v7)?"""
    return versions.get(LIST_OFFSETS, (-1, -1))[1] >= 7


async def api_versions(client: AIOKafkaClient) -> dict[int, tuple[int, int]]:
    """One broker's ApiVersions: api key → (min, max). Raises what the request raised."""
    node = client.get_random_node()
    if node is None:
        raise kafka_errors.KafkaConnectionError("no broker known")
    response = await client.send(node, ApiVersionRequest())
    return {key: (low, high) for key, low, high, *_ in response.api_versions}
