"""syncer: keep local Kafka partitions offset-for-offset identical to remote ones."""

from syncer.errors import ConfigError, PartitionHalted, SyncerError

__all__ = ["ConfigError", "PartitionHalted", "SyncerError"]
