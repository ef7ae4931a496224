"""syncer: keep local Kafka partitions offset-for-offset identical to remote ones.

The library, as an asyncio service embeds it (``examples/embed.py``)::

    config = Config(local=ClusterConfig("localhost:9092"), remotes=(...), topics=...)
    async with Syncer(config, registry=my_registry) as syncer:
        async with syncer.events() as events:   # Halted, CaughtUp, Resumed, RemoteDropped...
            ...
        summary = await syncer.catch_up()       # or run() until request_stop()/stop()
        snapshot = syncer.snapshot()            # Snapshot: PartitionStatus per partition

Errors: everything raised is a ``SyncerError``; catch ``ConfigError`` (``problems`` lists
every problem), ``UnreachableError``/``AuthenticationError``/``BrokerTooOld`` (a cluster),
``TransientClusterError`` (retriable, retries spent), ``PartitionHalted`` and its kinds (one
partition stopped; a catch-up reports them in ``Summary.halted`` and ``Halted`` events).
"""

# The one place the version lives: pyproject.toml reads it from here (setuptools dynamic
# version, parsed without importing), `syncer --version` prints it.
__version__ = "0.1.0"

from syncer.config import (
    ClusterConfig,
    Config,
    CoordinationConfig,
    CopierConfig,
    GroupsConfig,
    HolePolicy,
    HttpConfig,
    TopicsConfig,
)
from syncer.errors import (
    AuthenticationError,
    BrokerTooOld,
    ClusterError,
    ConfigError,
    ExitCode,
    ForeignWrite,
    HoleFound,
    MisalignedWrite,
    PartitionHalted,
    SourceDataLost,
    SyncerError,
    TransientClusterError,
    UnreachableError,
)
from syncer.events import (
    CaughtUp,
    Event,
    Halted,
    RemoteDropped,
    RemoteRecovered,
    Resumed,
    Subscription,
)
from syncer.status import PartitionStatus, RemoteStatus, Snapshot, State, Summary
from syncer.syncer import Syncer

__all__ = [
    "AuthenticationError",
    "BrokerTooOld",
    "CaughtUp",
    "ClusterConfig",
    "ClusterError",
    "Config",
    "ConfigError",
    "CoordinationConfig",
    "CopierConfig",
    "Event",
    "ExitCode",
    "ForeignWrite",
    "GroupsConfig",
    "Halted",
    "HoleFound",
    "HolePolicy",
    "HttpConfig",
    "MisalignedWrite",
    "PartitionHalted",
    "PartitionStatus",
    "RemoteDropped",
    "RemoteRecovered",
    "RemoteStatus",
    "Resumed",
    "Snapshot",
    "SourceDataLost",
    "State",
    "Subscription",
    "Summary",
    "Syncer",
    "SyncerError",
    "TopicsConfig",
    "TransientClusterError",
    "UnreachableError",
]
