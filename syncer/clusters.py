"""One object per cluster over aiokafka, and the names the rest of syncer uses from the
cluster layer. ``Cluster`` is put together from what each part owns:

- ``syncer.connection``: start and stop, bootstrap, metadata, topic ids, leaders, sending a
  request (socket tuning), the mapping of Kafka errors to ours, and client options (TLS
  contexts built once per cluster);
- ``syncer.wire``: the raw requests of the data path (list offsets, fetch, produce,
  InitProducerId) and their answers;
- ``syncer.admin``: topics, broker settings, consumer groups and deleting records.

Error codes leave as our errors (``error_for``) or named constants. Outside this layer (these
modules and ``protocol``) aiokafka is used only for what it does whole: its producer and
consumer (``identity``), its group membership (``coordination``), its record-batch codec
(``batches``), and in the test bed."""

from __future__ import annotations

from syncer.admin import TopicAdmin
from syncer.connection import TP, client_options, error_for, is_retriable
from syncer.wire import (
    EARLIEST,
    LATEST,
    OFFSET_OUT_OF_RANGE,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchedPartition,
    ProduceResult,
    WireRequests,
)

__all__ = [
    "EARLIEST",
    "LATEST",
    "OFFSET_OUT_OF_RANGE",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "TP",
    "Cluster",
    "FetchedPartition",
    "ProduceResult",
    "client_options",
    "error_for",
    "is_retriable",
]


class Cluster(WireRequests, TopicAdmin):
    """A connection to one cluster, with its requests and admin calls.
    ``async with Cluster(cfg, role="local") as cluster: ...``"""
