"""How the fetcher asks a remote broker for records: by topic id (Fetch v13, in a session
for the quiet polls) where the remote reports ids, else by name, and by name from then on
once a broker shows it has no Fetch v13 (Kafka before 3.1)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from syncer.clusters import TP, Cluster, FetchedPartition
from syncer.config import CopierConfig
from syncer.errors import TransientClusterError
from syncer.fetch_session import FetchSession
from syncer.ratelimit import ByteRate, request_bytes

log = logging.getLogger(__name__)


class FetchRequests:
    """One remote's fetch requests. ``topic_ids``: the ids remembered for its topics (the
    owner adds to it); None: fetch by name only."""

    def __init__(
        self,
        cluster: Cluster,
        config: CopierConfig,
        caps: tuple[ByteRate, ...],
        topic_ids: Mapping[str, uuid.UUID] | None,
    ) -> None:
        self.cluster = cluster
        self.config = config
        self.caps = caps
        self.topic_ids: Mapping[str, uuid.UUID] = topic_ids if topic_ids is not None else {}
        self.by_id = topic_ids is not None

    def ask_then(
        self,
        node: int,
        connection: int,
        offsets: dict[TP, tuple[int, int]],
        wait_ms: int,
        then: Callable[[dict[TP, FetchedPartition] | Exception], None],
    ) -> Callable[[], None] | None:
        """``ask`` without a session, its request written before this returns (by topic id,
        on a connection open already: ``Cluster.fetch_by_id_then``) and its outcome handed
        to ``then`` as it comes; what gives it up, or None where it cannot be written now
        (then ``ask``)."""
        if not (self.by_id and self.topic_ids):
            return None
        sizes = self._sizes(connection, wait_ms)
        return self.cluster.fetch_by_id_then(
            node, offsets, self.topic_ids, then, nearest=True, **sizes
        )

    def _sizes(self, connection: int, wait_ms: int) -> dict[str, Any]:
        full = self.config.partition_fetch_max_bytes
        most = request_bytes(self.config.fetch_max_bytes, full, self.caps)
        sizes = {"max_wait_ms": wait_ms, "max_bytes": most, "partition_max_bytes": full}
        return sizes | {"connection": connection}

    async def ask(
        self,
        node: int,
        connection: int,
        offsets: dict[TP, tuple[int, int]],
        wait_ms: int,
        session: FetchSession | None,
    ) -> dict[TP, FetchedPartition]:
        """One fetch request on ``connection`` of ``node``; in ``session`` if given (its
        partitions are in the session, not in ``offsets``: that takes topic ids)."""
        sizes = self._sizes(connection, wait_ms)
        if self.by_id and self.topic_ids:
            try:
                return await self.cluster.fetch_by_id(
                    node, offsets, self.topic_ids, nearest=True, session=session, **sizes
                )
            except NotImplementedError:  # the broker has no Fetch v13 (Kafka before 3.1)
                log.warning(
                    "remote %s cannot fetch by topic id (Kafka 3.1+ can): a topic recreated"
                    " there is told only by the topic refresh and the record comparison",
                    self.cluster.name,
                )
                self.by_id = False
        if session is not None:
            raise TransientClusterError(f"{self.cluster.name}: a quiet poll needs topic ids")
        return await self.cluster.fetch(node, offsets, nearest=True, **sizes)
