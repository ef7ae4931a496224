"""The ``syncer`` command: thin; it builds a Config and calls the library."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import logging
import platform
import signal
import sys
import time
from collections.abc import Coroutine, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import aiokafka
from rich.console import Console
from rich.live import Live
from rich.text import Text

from syncer import __version__, schema
from syncer.check import exit_code, print_lines
from syncer.clusters import TP, Cluster, ClusterSet
from syncer.config import Config
from syncer.errors import ExitCode, SyncerError
from syncer.heap import keep_heap_settled
from syncer.http import StatusServer
from syncer.offsets import GroupStatus
from syncer.preflight import log_preflight, preflight
from syncer.progress import CatchUpProgress
from syncer.report import (
    PartitionRow,
    RemoteRow,
    fetch_live,
    gather_rows,
    merge_live,
    producer_state_note,
    remote_rows,
    topic_notes,
)
from syncer.status import Summary
from syncer.syncer import Syncer
from syncer.tables import print_report, print_verdicts, render
from syncer.tasks import cancel_and_wait, once_set
from syncer.testbed import cli as testbed_cli
from syncer.verify import Verdict, verify_partition
from syncer.writes import read_state_clock

log = logging.getLogger("syncer")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="syncer",
        description="Keep local Kafka partitions offset-for-offset identical to remote ones.",
    )
    # the versions a bug report needs: ours, and the interpreter and transport underneath
    runtime = f"Python {platform.python_version()}, aiokafka {aiokafka.__version__}"
    parser.add_argument("--version", action="version", version=f"syncer {__version__} ({runtime})")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: one JSON object per line (time, level, logger, message)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    commands = (
        ("run", "the daemon: copy continuously until SIGTERM/SIGINT", _run),
        ("catch-up", "one shot: copy up to the remote ends seen at start, then exit", _catch_up),
        ("plan", "dry run: ends, gaps and the first hole per partition", _plan),
        ("status", "ends, lag and state per partition", _status),
        ("check", "preflight: OK / WARN / FAIL per check, changing nothing", _check),
    )
    for name, text, func in commands:
        p = sub.add_parser(name, help=text)
        p.add_argument("-c", "--config", required=True, type=Path, help="YAML configuration")
        if name in ("plan", "status", "check"):
            p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        if name == "status":
            p.add_argument(
                "--watch",
                nargs="?",
                const=2.0,
                type=float,
                metavar="SECONDS",
                help="a live view, refreshed every SECONDS (default 2) until Ctrl-C",
            )
            p.add_argument(
                "--daemon",
                action="append",
                metavar="HOST:PORT",
                help="a running daemon's http.listen to read live figures from (repeat for"
                " each member of a group); default: the config's http.listen",
            )
        if name == "catch-up":
            p.add_argument("--no-progress", action="store_true", help="no progress bar")
        p.set_defaults(func=func)
    p = sub.add_parser(
        "verify",
        help="compare local partitions with the remotes' and name the first divergent offset",
    )
    p.add_argument("-c", "--config", required=True, type=Path, help="YAML configuration")
    p.add_argument(
        "--topic", action="append", help="only this topic (repeatable); default: the selection"
    )
    p.add_argument("--partition", type=int, action="append", help="only this partition")
    p.add_argument("--remote", action="append", help="only this remote (repeatable)")
    p.add_argument("--from", dest="low", type=int, metavar="OFFSET", help="first offset")
    p.add_argument("--to", dest="high", type=int, metavar="OFFSET", help="end offset (excluded)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_verify)
    testbed_cli.add_parser(sub)  # `syncer testbed`: its verbs, handler and errors
    schema.add_parser(sub)  # `syncer config schema`
    return parser


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def setup_logging(verbosity: int, fmt: str = "text") -> None:
    level = logging.DEBUG if verbosity > 1 else logging.INFO if verbosity else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    if verbosity < 2:
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def _exit_code(summary: Summary) -> int:
    return ExitCode.HALTED if summary.halted or summary.refused else ExitCode.OK


def _catch_up_exit_code(summary: Summary) -> int:
    """A catch-up's exit code: 5 also where a consumer group's offsets were not all copied
    (a fail-over then would start its consumers elsewhere than they were)."""
    return _exit_code(summary) or (ExitCode.HALTED if summary.group_failures else ExitCode.OK)


def _group_lines(groups: Mapping[str, GroupStatus], summary: Summary) -> list[str]:
    """What a catch-up says of its consumer groups beside the summary: each group whose
    offsets could not be copied (a failure: exit 5), and each left alone or with offsets the
    local log does not reach (committed at the remote after the ends were taken: not a
    failure)."""
    lines = list(summary.group_failures)
    for name, group in sorted(groups.items()):
        if group.skipped and not group.failed:
            lines.append(f"group {name}: left alone: {group.skipped}")
        if group.waiting:
            lines.append(
                f"group {name}: {group.waiting} offsets beyond the local end (committed at"
                f" remote {group.source} after the catch-up took its ends) not copied"
            )
    return lines


def _run_async(coro: object) -> int:
    import uvloop

    return int(uvloop.run(coro))  # type: ignore[arg-type]


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP (a closed terminal) stop a copy: the first drains the
    writes in flight (``Syncer.request_stop``), a second one stops at once (every task
    cancelled: what was in flight may have landed or not, and the next start reads the
    local ends and checks it, as after a kill). ``interrupted``: a signal came;
    ``forced``: a second one."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.interrupted = False
        self.forced = False

    def install(self, syncer: Syncer) -> None:
        """The handlers, in place of the defaults; a signal ignored already (SIGHUP under
        ``nohup``) stays ignored."""
        loop = asyncio.get_running_loop()
        for signum in self.SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                loop.add_signal_handler(signum, self._on_signal, syncer, loop)

    def _on_signal(self, syncer: Syncer, loop: asyncio.AbstractEventLoop) -> None:
        if not self.interrupted:
            self.interrupted = True
            log.warning("stopping: draining writes in flight (signal again to force)")
            syncer.request_stop()
            return
        self.forced = True
        for task in asyncio.all_tasks(loop):
            task.cancel("forced exit")

    def run(self, coro: Coroutine[Any, Any, int]) -> int:
        """``coro`` run to its exit code; stopped at once by a second signal: one line and
        ``ExitCode.INTERRUPTED``, not a traceback."""
        try:
            return _run_async(coro)
        except asyncio.CancelledError:
            if not self.forced:
                raise
            print(
                "syncer: stopped at once by a second signal: writes in flight may have landed"
                " or not; the next start reads the local ends and checks them",
                file=sys.stderr,
            )
            return ExitCode.INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    config = Config.from_file(args.config)
    signals = StopSignals()

    async def main() -> int:
        syncer = Syncer(config)
        signals.install(syncer)
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, _dump_tasks)
        async with contextlib.AsyncExitStack() as stack:
            address = config.http.address
            if address is not None:
                await stack.enter_async_context(StatusServer(syncer, address))
            await stack.enter_async_context(syncer)
            # `syncer check`'s lines, every WARN and FAIL logged, beside the copy: it neither
            # holds up nor refuses anything (a FAIL's refusal or halt is the copy's to make).
            # It starts once the first plan's local topics exist (or after 60 s): at 10,000
            # partitions, 3 members' checks beside the creation took the broker's CPU. Then
            # what the daemon keeps is frozen out of the collector's passes (and thawed,
            # collected and frozen again after its copiers change: syncer.heap)
            check = once_set(
                syncer.planned, 60.0, partial(_check_then_keep_settled, config, syncer)
            )
            checks = asyncio.create_task(check, name="check")
            try:
                summary = await syncer.run()
            finally:
                await cancel_and_wait(checks)
        print(summary.line(), file=sys.stderr)
        return _exit_code(summary)

    return signals.run(main())


async def _check_then_keep_settled(config: Config, syncer: Syncer) -> None:
    await log_preflight(config)  # never raises: what ends it early is logged
    await keep_heap_settled(lambda: syncer.copiers_changed)


def _dump_tasks() -> None:
    """SIGUSR1: log where every task of the daemon waits (for a process that seems stuck):
    the chain of awaits from the task's coroutine down to what it waits on."""
    for task in asyncio.all_tasks():
        chain = []
        awaited: Any = task.get_coro()
        while awaited is not None and hasattr(awaited, "cr_frame"):
            frame = awaited.cr_frame
            if frame is not None:
                chain.append(
                    f"{frame.f_code.co_qualname} ({frame.f_code.co_filename}:{frame.f_lineno})"
                )
            awaited = awaited.cr_await
        if awaited is not None:
            chain.append(repr(awaited)[:200])
        log.warning("task %s: %s", task.get_name(), " -> ".join(chain))


def _catch_up(args: argparse.Namespace) -> int:
    config = Config.from_file(args.config)
    signals = StopSignals()

    async def main() -> int:
        syncer = Syncer(config)
        signals.install(syncer)  # before the start: a stop asked for then is kept
        async with syncer:
            with CatchUpProgress(syncer, enabled=not args.no_progress and sys.stderr.isatty()):
                summary = await syncer.catch_up()
            for status in syncer.statuses():
                if status.error:
                    print(f"syncer: {status.error}", file=sys.stderr)
            for topic, reason in syncer.refused.items():
                print(f"syncer: topic {topic} refused: {reason}", file=sys.stderr)
            if syncer.group_offsets_left_to is not None:
                print(
                    f"syncer: consumer group offsets left to the running members of group"
                    f" {syncer.group_offsets_left_to} (one of them copies them)",
                    file=sys.stderr,
                )
            for line in _group_lines(syncer.offsets.groups, summary):
                print(f"syncer: {line}", file=sys.stderr)
        print(summary.line(), file=sys.stderr)
        code = _catch_up_exit_code(summary)
        if signals.interrupted and not code:
            print("syncer: catch-up stopped by a signal before the ends", file=sys.stderr)
            return ExitCode.INTERRUPTED
        return code

    return signals.run(main())


def _verify(args: argparse.Namespace) -> int:
    config = Config.from_file(args.config)
    if args.low is not None and args.high is not None and args.high <= args.low:
        print("syncer: verify: --to must be above --from", file=sys.stderr)
        return ExitCode.USAGE

    async def main() -> int:
        clusters = ClusterSet(config, remotes=args.remote, lanes=False)
        if args.remote and set(args.remote) - set(clusters.remotes):
            unknown = ", ".join(sorted(set(args.remote) - set(clusters.remotes)))
            print(f"syncer: verify: no remote named {unknown} in the config", file=sys.stderr)
            return ExitCode.USAGE
        async with clusters:
            verdicts = await _verdicts(config, clusters.local, clusters.remotes, args)
        if not verdicts:
            print("syncer: verify: no partition to compare", file=sys.stderr)
            return ExitCode.USAGE
        print_verdicts(verdicts, as_json=args.json)
        return ExitCode.DIVERGED if any(v.divergence for v in verdicts) else ExitCode.OK

    return _run_async(main())


async def _verdicts(
    config: Config, local: Cluster, remotes: dict[str, Cluster], args: argparse.Namespace
) -> list[Verdict]:
    local_counts = await local.partition_counts()
    topics = args.topic or sorted(t for t in local_counts if config.mirrors(t))
    out = []
    for name, remote in remotes.items():
        remote_counts = await remote.partition_counts()
        for topic in topics:
            count = min(local_counts.get(topic, 0), remote_counts.get(topic, 0))
            for partition in range(count):
                if args.partition and partition not in args.partition:
                    continue
                tp = TP(topic, partition)
                verdict = await verify_partition(
                    local, remote, name, tp, low=args.low, high=args.high
                )
                out.append(verdict)
    return out


def _check(args: argparse.Namespace) -> int:
    config = Config.from_file(args.config)

    async def main() -> int:
        lines = await preflight(config)
        print_lines(lines, as_json=args.json)
        return exit_code(lines)

    return _run_async(main())


def _plan(args: argparse.Namespace) -> int:
    return _report(args, holes=True, title="plan (dry run)")


def _status(args: argparse.Namespace) -> int:
    return _report(args, holes=False, title="status")


def _report(args: argparse.Namespace, *, holes: bool, title: str) -> int:
    config = Config.from_file(args.config)
    urls = getattr(args, "daemon", None) or _default_daemon(config)
    watch = getattr(args, "watch", None)

    async def main() -> int:
        syncer = Syncer(config)  # not started: its clusters are, and its topics plan from them
        names = list(syncer.remotes)
        try:
            # a remote that does not answer is left out: the others are still worth showing
            await syncer.clusters.start(required=False)
            down = {n: str(e).rpartition(": ")[2] for n, e in syncer.clusters.unreachable.items()}
            if watch is None:
                rows, remotes, notes = await _snapshot(syncer, names, down, urls, holes=holes)
                print_report(
                    rows, remotes, as_json=args.json, title=title, holes=holes, notes=notes
                )
                return 0
            await _watch(syncer, names, down, urls, watch, title)
            return 0
        finally:
            await syncer.clusters.stop()

    return _run_async(main())


async def _snapshot(
    syncer: Syncer, names: list[str], down: dict[str, str], urls: list[str], *, holes: bool
) -> tuple[list[PartitionRow], list[RemoteRow], list[str]]:
    rows = await gather_rows(syncer, look_for_holes=holes)
    live: list[dict[str, Any]] = []
    notes = [f"remote {n} is unreachable: {why}" for n, why in down.items()]
    if holes:  # plan: how the writes will go
        clock = await read_state_clock(syncer.local)
        notes.append(producer_state_note(clock, rows, int(time.time() * 1000)))
    if not holes and urls:
        live, problems = await asyncio.to_thread(fetch_live, urls)
        merge_live(rows, live)
        notes += problems + topic_notes(live)
    return rows, remote_rows(names, rows, down, live), notes


async def _watch(
    syncer: Syncer,
    names: list[str],
    down: dict[str, str],
    urls: list[str],
    period: float,
    title: str,
) -> None:
    """Refresh the status tables in place until Ctrl-C, with each partition's copy rate."""
    before: dict[tuple[str, int], tuple[int, float]] = {}
    console = Console(width=None if sys.stdout.isatty() else 200)
    with Live(console=console, auto_refresh=False, screen=False) as live:
        while True:
            try:
                rows, remotes, notes = await _snapshot(syncer, names, down, urls, holes=False)
            except SyncerError as exc:  # a cluster blinked: say so, keep watching
                live.update(Text(f"{time.strftime('%H:%M:%S')} {exc}", style="red"), refresh=True)
                await asyncio.sleep(period)
                continue
            now = time.monotonic()
            rates = {}
            for row in rows:
                key = (row.topic, row.partition)
                if key in before and now > before[key][1]:
                    rates[key] = max(0, row.local_end - before[key][0]) / (now - before[key][1])
                before[key] = (row.local_end, now)
            stamp = time.strftime("%H:%M:%S")
            view = render(
                rows, remotes, title=f"{title} · {stamp}", holes=False, notes=notes, rates=rates
            )
            live.update(view, refresh=True)
            await asyncio.sleep(period)


def _default_daemon(config: Config) -> list[str]:
    address = config.http.address
    if address is None or address[1] == 0:
        return []
    host = "127.0.0.1" if address[0] in ("0.0.0.0", "::") else address[0]
    return [f"{host}:{address[1]}"]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose, args.log_format)
    try:
        return int(args.func(args))
    except SyncerError as exc:
        print(f"syncer: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        if getattr(args, "watch", None) is not None:
            return ExitCode.OK  # Ctrl-C is how a live view ends
        return ExitCode.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
