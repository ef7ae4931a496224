"""Which remote serves which chunk of a partition's gap: pure decisions over measured health.

Each remote has one ``SourceHealth`` per process, shared by all partitions: a moving average of
its fetch throughput, its error streak, after errors a back-off during which it serves
nothing, and the chunks of every partition in flight on it. A chunk goes to the healthy remote
that holds it with the best throughput per chunk in flight, so faster sources take more
chunks; but a partition's chunks stay on the remote of the chunk before them (its "home")
while the other remotes are kept busy by their own partitions, since each switch costs a
batch more (``lead_for``)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from enum import Enum

from syncer.holes import RemoteEnds
from syncer.wire import FetchOutcome

EWMA_WEIGHT = 0.3
# chunks of one partition queued on one remote at once: one being fetched, one waiting; more
# would only wait in its queue (and count against the chunk timeout)
MAX_BUSY = 2
BACKOFF_S = 1.0
BACKOFF_MAX_S = 30.0
# the remote of the chunk just before keeps the next one while its rate per chunk in flight
# is at least this share of the best (a chunk from another remote is fetched with a lead)
SAME_SOURCE_SHARE = 0.5
# a remote with fewer chunks than this per lane in flight for the whole process has room: its
# link would idle soon, so a partition at home elsewhere sends it its next chunk; with this
# many, it is busy with its own partitions, and the others' chunks stay at their homes
SPARE_BELOW = MAX_BUSY


@dataclass
class SourceHealth:
    """Measured figures of one remote."""

    name: str
    rank: int  # position in the configuration: earlier remotes are trusted first
    lanes: int = 1  # connections read in parallel: a remote with more takes more chunks
    bytes_per_s: float = 0.0
    served_bytes: int = 0
    served_records: int = 0
    errors: int = 0
    failures_in_row: int = 0
    unhealthy_until: float = 0.0
    last_error: str | None = None
    last_failure: float = float("-inf")
    # closed chunks of every partition in flight on it now (``ChunkPlan`` counts them)
    chunks: int = 0
    # told (name, why) when it starts backing off, (name, None) when a fetch succeeds again
    watcher: Callable[[str, str | None], None] | None = field(
        default=None, repr=False, compare=False
    )

    def healthy(self, now: float) -> bool:
        return now >= self.unhealthy_until

    def succeeded(self, nbytes: int, seconds: float) -> None:
        if self.failures_in_row and self.watcher is not None:
            self.watcher(self.name, None)
        self.failures_in_row = 0
        if nbytes > 0 and seconds > 0:
            rate = nbytes / seconds
            self.bytes_per_s = (
                rate
                if not self.bytes_per_s
                else (EWMA_WEIGHT * rate + (1 - EWMA_WEIGHT) * self.bytes_per_s)
            )

    def count_served(self, nbytes: int, records: int) -> None:
        """Records of this remote landed locally (status shows what each remote served)."""
        self.served_bytes += nbytes
        self.served_records += records

    def failed(self, now: float, error: str, started: float | None = None) -> None:
        """A fetch that began at ``started`` failed. Fetches already under way when the
        previous failure was seen fail with it (one cut link fails every chunk in flight on
        every lane): they count as errors, not as one more failure in a row each."""
        self.errors += 1
        self.last_error = error
        if started is not None and started < self.last_failure:
            return
        self.last_failure = now
        self.failures_in_row += 1
        doublings = min(self.failures_in_row - 1, 16)  # 2**1024 overflows a float
        backoff = min(BACKOFF_MAX_S, BACKOFF_S * 2**doublings)
        self.unhealthy_until = now + backoff
        if self.failures_in_row == 1 and self.watcher is not None:
            self.watcher(self.name, error)

    def leader_moved(self, error: str) -> None:
        """A fetch found the partition led elsewhere: no failure of the remote (no back-off),
        but counted, so partitions compare its records again before writing from it (a
        leader elected unclean may hold another log)."""
        self.errors += 1
        self.last_error = error

    def broker_failed(self, error: str) -> None:
        """A fetch failed at one broker while the remote's others answer
        (``brokers.BrokerFailed``): the partitions routed there wait for that broker or a new
        leader, the remote does not back off. Counted all the same, so partitions compare its
        records again before writing from it (the new leader may hold another log)."""
        self.errors += 1
        self.last_error = error

    def state(self, now: float) -> str:
        return "healthy" if self.healthy(now) else "backing off"


def usable_sources(
    offset: int,
    ends: Mapping[str, RemoteEnds],
    health: Mapping[str, SourceHealth],
    excluded: Collection[str],
    now: float,
) -> list[str]:
    """Healthy remotes, not excluded, that hold ``offset``; most trusted first."""
    return sorted(
        (
            name
            for name, e in ends.items()
            if e.start <= offset < e.end and name not in excluded and health[name].healthy(now)
        ),
        key=lambda n: health[n].rank,
    )


def pick_source(
    offset: int,
    ends: Mapping[str, RemoteEnds],
    health: Mapping[str, SourceHealth],
    busy: Mapping[str, int],
    excluded: Collection[str],
    now: float,
    before: str | None = None,
) -> str | None:
    """The remote to fetch ``offset`` from, None to wait: it must hold the offset, be healthy,
    not be excluded for this partition and have room for it (``busy``: this partition's
    chunks in flight per remote; ``MAX_BUSY`` per lane). Among those, the best throughput per
    chunk in flight in the whole process wins (an unmeasured remote counts as fast as the
    fastest, so it gets tried; one read over several lanes counts as that many times as
    fast). ``before``, the remote of the chunk ending at ``offset``, is the partition's home
    (``home_choice``): a chunk from another remote carries the batch below its start for the
    agreement check (``lead_for``), one batch more per switch."""
    usable = usable_sources(offset, ends, health, excluded, now)
    holders = [n for n in usable if busy.get(n, 0) < MAX_BUSY * health[n].lanes]
    if not holders:
        return None
    fastest = max((health[n].bytes_per_s for n in usable), default=0.0) or 1.0

    def score(name: str) -> tuple[float, int]:
        # a fetch's measured rate is one lane's: the remote moves about that much per lane
        rate = (health[name].bytes_per_s or fastest) * health[name].lanes
        return (rate / (1 + load(name, health, busy)), -health[name].rank)

    spare = [n for n in holders if load(n, health, busy) < SPARE_BELOW * health[n].lanes]
    if before is None or before not in usable:
        return max(spare or holders, key=score)
    return home_choice(before, holders, spare, score)


def load(name: str, health: Mapping[str, SourceHealth], busy: Mapping[str, int]) -> int:
    """Chunks in flight on remote ``name``: the process's, at least this partition's."""
    return max(health[name].chunks, busy.get(name, 0))


def home_choice(
    home: str,
    holders: Collection[str],
    spare: Collection[str],
    score: Callable[[str], tuple[float, int]],
) -> str | None:
    """The remote for a partition's next chunk whose chunk before it came from ``home``
    (usable still), None to wait for room there. ``holders``: the remotes with room for it;
    ``spare``: those of them whose links would idle soon (``SPARE_BELOW``). Where home's own
    link would idle, home keeps it unless another is far faster (``SAME_SOURCE_SHARE``);
    else it goes where a link would idle (a switch costs one batch, an idle link all of its
    rate). With every link busy it stays at home, or waits for room there: elsewhere it
    would only take a turn from another partition, and the rates measured per chunk vary
    too much with what shares its request to say more (3 remotes, 8 partitions: chunks
    moved between busy remotes by those rates, one lead each)."""
    if home in spare:
        best = max(holders, key=score)
        return best if score(home)[0] < SAME_SOURCE_SHARE * score(best)[0] else home
    away = [n for n in spare if n != home]
    if away:
        return max(away, key=score)
    return home if home in holders else None


def tail_source(
    ends: Mapping[str, RemoteEnds],
    health: Mapping[str, SourceHealth],
    excluded: Collection[str],
    now: float,
) -> str | None:
    """The remote to long-poll when caught up: the healthy one furthest ahead, then the most
    trusted. None while every one backs off (the copier polls again after the back-off, not
    in a tight loop against a remote that fails every fetch)."""
    usable = [n for n in ends if n not in excluded and health[n].healthy(now)]
    if not usable:
        return None
    return max(usable, key=lambda n: (ends[n].end, -health[n].rank))


class Verdict(Enum):
    """What a chunk's fetch answer means for the chunk and for the remote that gave it."""

    READY = "ready"  # records (or none): the answer is the chunk's
    # another broker leads the partition now: fetched again at once, held by the fetcher
    # until the metadata refresh the answer started has ended; the remote did nothing wrong,
    # so it does not back off (a 1 s pause per leader move otherwise)
    ASK_AGAIN = "ask again"
    REMOTE_FAILED = "remote failed"  # it backs off; another remote, or it after that, asks
    HALT = "halt"  # the only remote can never serve the offset: the partition halts


def judge(outcome: FetchOutcome, others: Callable[[], bool]) -> Verdict:
    """The verdict on a fetch answer with ``outcome``; ``others()``: another remote usable for
    this partition could take the chunk instead (asked only where the verdict turns on it:
    not for the answers that bring records, every answer of a steady copy)."""
    if outcome is FetchOutcome.OK:
        return Verdict.READY
    if outcome is FetchOutcome.LEADER_MOVED:
        return Verdict.ASK_AGAIN
    if outcome.retriable or outcome is FetchOutcome.OUT_OF_RANGE or others():
        # out of range: the remote's log starts above the offset or ends below it; the
        # copier then lists its ends and halts naming them (``Agreement.check_ends``)
        return Verdict.REMOTE_FAILED
    return Verdict.HALT


def lead_for(start: int, remote: str, before: str | None, others: bool, log_start: int) -> int:
    """Offsets below ``start`` a closed chunk of ``remote`` is fetched from: one, so that its
    answer carries the batch just below its start, when the chunk written before it may come
    from another remote (``before``: the remote of the chunk ending at ``start``, where one is
    known; ``others``: another remote holds ``start``). The agreement check compares that
    batch with what was written (``Proof.WRITTEN``); chunks of whole batches do not overlap,
    so without it the check fetched the batch itself, a round trip the writes waited for
    (3 remotes: 199 of 478 fetches). Those records are never written (the copy starts at the
    frontier). None at the remote's log start, and none when the same remote wrote before."""
    if start <= log_start:
        return 0
    if before is not None:
        return int(before != remote)
    return int(others)
