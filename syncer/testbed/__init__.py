"""A bed of real Apache Kafka clusters (KRaft, one node each or several) on loopback.

For tests, benchmarks, demos and your own experiments: jars come from Maven Central once into
a cache, each cluster runs in its own JVM with a small heap, and a JSON state file names every
cluster and its bootstrap address so that ``syncer testbed status|down`` can find them again.
"""

from syncer.testbed.bed import ClusterSpec, Testbed
from syncer.testbed.errors import TestbedError
from syncer.testbed.jars import KAFKA_VERSION, KafkaJars
from syncer.testbed.node import RunningCluster
from syncer.testbed.quorum import MultiNodeCluster

__all__ = [
    "KAFKA_VERSION",
    "ClusterSpec",
    "KafkaJars",
    "MultiNodeCluster",
    "RunningCluster",
    "Testbed",
    "TestbedError",
]
