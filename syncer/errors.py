"""One exception tree for syncer.

Errors carry what the caller does about them as class attributes: ``retriable`` errors are
retried with backoff (tenacity retries exactly these); the others halt what they affect.
``exit_code`` is what the CLI exits with when such an error ends a command (docs/operations.md,
"Exit codes").
"""

from __future__ import annotations

from typing import ClassVar


class ExitCode:
    """Documented process exit codes."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    CONFIG = 3
    UNREACHABLE = 4
    HALTED = 5  # some partitions halted or topics were refused; the rest finished
    TESTBED = 6  # syncer testbed: the bed could not do what was asked
    DIVERGED = 7  # verify: a local partition differs from a remote's
    AUTHENTICATION = 8  # a cluster refused our credentials, or TLS failed
    TOO_OLD = 9  # a cluster's brokers lack request versions syncer needs
    CHECK_FAILED = 10  # syncer check: at least one line is a FAIL
    INTERRUPTED = 130


class SyncerError(Exception):
    """Base of every error syncer raises."""

    retriable: ClassVar[bool] = False
    exit_code: ClassVar[int] = ExitCode.INTERNAL


class ConfigError(SyncerError):
    """The configuration is invalid; ``problems`` lists every problem with its path."""

    exit_code = ExitCode.CONFIG

    def __init__(self, problems: list[str], source: str = "config") -> None:
        self.problems = problems
        self.source = source
        super().__init__(f"{source}: " + "; ".join(problems))


class ClusterError(SyncerError):
    """A cluster answered with an error or not at all."""


class TransientClusterError(ClusterError):
    """Leader moved, timeout, disconnect: worth another try after a pause. One still there
    when a command ends (retries spent) means a cluster stopped answering: not a bug."""

    retriable = True
    exit_code = ExitCode.UNREACHABLE


class LeaderMoved(TransientClusterError):
    """The broker asked does not lead the partition (any more): the cluster's metadata is
    being refreshed, so the next try goes to the new leader; worth it after the first step
    of the backoff, not a growing one (a leader election is over within a second)."""


class NotSent(TransientClusterError):
    """A request was not sent: what allowed it when it was made (the group's lease) had
    ended by the time its connection was open. Nothing of it reached the broker."""


class OffsetOutOfRange(ClusterError):
    """A read of a partition was answered out of range: its log starts above the offset
    asked or ends below it (records deleted, or never there)."""


class UnreachableError(ClusterError):
    """A cluster's bootstrap servers cannot be reached."""

    exit_code = ExitCode.UNREACHABLE


class AuthenticationError(ClusterError):
    """A cluster refused our credentials or certificate, or its certificate is not trusted."""

    exit_code = ExitCode.AUTHENTICATION


class BrokerTooOld(ClusterError):
    """A cluster's brokers do not answer the request versions syncer needs (too old a
    Kafka): refused at start, before anything is read or written."""

    exit_code = ExitCode.TOO_OLD


class PartitionHalted(SyncerError):
    """One partition cannot go on safely; the others continue."""

    exit_code = ExitCode.HALTED


class MisalignedWrite(PartitionHalted):
    """A produce response's base offset differs from the source offset (invariant 1)."""


class HoleFound(PartitionHalted):
    """The source has an offset with no readable data record (invariant 4)."""


class SourceDataLost(PartitionHalted):
    """A remote's start is beyond the local end: records are gone at the source."""


class ForeignWrite(PartitionHalted):
    """Records in a mirrored local partition were written by someone else than syncer."""
