"""syncer: keep local Kafka partitions offset-for-offset identical to remote ones."""

# The one place the version lives: pyproject.toml reads it from here (setuptools dynamic
# version, parsed without importing), `syncer --version` prints it.
__version__ = "0.1.0"

from syncer.config import ClusterConfig, Config, CopierConfig, HolePolicy, TopicsConfig
from syncer.errors import (
    ClusterError,
    ConfigError,
    ExitCode,
    HoleFound,
    MisalignedWrite,
    PartitionHalted,
    SourceDataLost,
    SyncerError,
    TransientClusterError,
    UnreachableError,
)
from syncer.status import PartitionStatus, State, Summary
from syncer.syncer import Syncer

__all__ = [
    "ClusterConfig",
    "ClusterError",
    "Config",
    "ConfigError",
    "CopierConfig",
    "ExitCode",
    "HoleFound",
    "HolePolicy",
    "MisalignedWrite",
    "PartitionHalted",
    "PartitionStatus",
    "SourceDataLost",
    "State",
    "Summary",
    "Syncer",
    "SyncerError",
    "TopicsConfig",
    "TransientClusterError",
    "UnreachableError",
]
