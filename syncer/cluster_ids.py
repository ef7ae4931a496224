"""Whether a remote is the local cluster under another address, on plain values: the
cluster ids the brokers tell (Metadata v10, Kafka 2.8+) and their topics' ids."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import NamedTuple


class SameId(NamedTuple):
    """A remote that tells the local cluster's id: ``certain`` (a topic of the same id on
    both: refused) or not (a WARN), and the line saying so."""

    certain: bool
    detail: str


def shares_a_topic(
    local: Mapping[str, uuid.UUID] | None, remote: Mapping[str, uuid.UUID] | None
) -> bool:
    """Does a topic of one name have one id on both clusters? Topic ids are drawn at
    random as each topic is created: only one cluster holds the same topic."""
    if not local or not remote:
        return False
    return any(remote.get(name) == topic_id for name, topic_id in local.items())


def same_cluster(local_id: str | None, remote_id: str | None, shared_topic: bool) -> SameId | None:
    """A remote telling the local cluster's id: the local cluster itself under another
    address if they also share a topic (``shares_a_topic``); else clusters made from one
    configuration may share a cluster id (a compose file's CLUSTER_ID copied), only said.
    None if the ids differ, or either cluster did not tell one (brokers before Kafka 2.8)."""
    if local_id is None or remote_id != local_id:
        return None
    if shared_topic:
        return SameId(
            True, f"is the local cluster itself (cluster id {local_id}) under another address"
        )
    return SameId(
        False,
        f"tells the local cluster's id ({local_id}), but no topic of the same id: two"
        " clusters made with one cluster id?",
    )
