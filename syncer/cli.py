"""The ``syncer`` command: thin; it builds a Config and calls the library."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from syncer.config import Config
from syncer.errors import ExitCode, SyncerError, UnreachableError
from syncer.http import StatusServer
from syncer.progress import CatchUpProgress
from syncer.report import fetch_live, gather_rows, merge_live, print_report, remote_rows
from syncer.syncer import Summary, Syncer
from syncer.testbed import cli as testbed_cli

log = logging.getLogger("syncer")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="syncer",
        description="Keep local Kafka partitions offset-for-offset identical to remote ones.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = (
        ("run", "the daemon: copy continuously until SIGTERM/SIGINT", _run),
        ("catch-up", "one shot: copy up to the remote ends seen at start, then exit", _catch_up),
        ("plan", "dry run: ends, gaps and the first hole per partition", _plan),
        ("status", "ends, lag and state per partition", _status),
    )
    for name, text, func in commands:
        p = sub.add_parser(name, help=text)
        p.add_argument("-c", "--config", required=True, type=Path, help="YAML configuration")
        if name in ("plan", "status"):
            p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        if name == "status":
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
    testbed_cli.add_parser(sub)
    return parser


def setup_logging(verbosity: int) -> None:
    level = logging.DEBUG if verbosity > 1 else logging.INFO if verbosity else logging.WARNING
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    if verbosity < 2:
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def _exit_code(summary: Summary) -> int:
    return ExitCode.HALTED if summary.halted or summary.refused else ExitCode.OK


def _run_async(coro: object) -> int:
    import uvloop

    return int(uvloop.run(coro))  # type: ignore[arg-type]


def _run(args: argparse.Namespace) -> int:
    config = Config.from_file(args.config)

    async def main() -> int:
        syncer = Syncer(config)
        loop = asyncio.get_running_loop()
        interrupts = 0

        def on_signal() -> None:
            nonlocal interrupts
            interrupts += 1
            if interrupts == 1:
                log.warning("stopping: draining writes in flight (signal again to force)")
                syncer.request_stop()
            else:
                for task in asyncio.all_tasks(loop):
                    task.cancel("forced exit")

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal)
        async with contextlib.AsyncExitStack() as stack:
            address = config.http.address
            if address is not None:
                await stack.enter_async_context(StatusServer(syncer, address))
            await stack.enter_async_context(syncer)
            summary = await syncer.run()
        print(summary.line(), file=sys.stderr)
        return _exit_code(summary)

    return _run_async(main())


def _catch_up(args: argparse.Namespace) -> int:
    config = Config.from_file(args.config)

    async def main() -> int:
        async with Syncer(config) as syncer:
            with CatchUpProgress(syncer, enabled=not args.no_progress and sys.stderr.isatty()):
                summary = await syncer.catch_up()
            for status in syncer.statuses():
                if status.error:
                    print(f"syncer: {status.error}", file=sys.stderr)
            for topic, reason in syncer.refused.items():
                print(f"syncer: topic {topic} refused: {reason}", file=sys.stderr)
        print(summary.line(), file=sys.stderr)
        return _exit_code(summary)

    return _run_async(main())


def _plan(args: argparse.Namespace) -> int:
    return _report(args, holes=True, title="plan (dry run)")


def _status(args: argparse.Namespace) -> int:
    return _report(args, holes=False, title="status")


def _report(args: argparse.Namespace, *, holes: bool, title: str) -> int:
    config = Config.from_file(args.config)

    async def main() -> int:
        syncer = Syncer(config)
        names = list(syncer.remotes)
        down: dict[str, str] = {}
        try:
            await syncer.local.start()
            for name, remote in list(syncer.remotes.items()):
                try:
                    await remote.start()
                except UnreachableError as exc:
                    down[name] = str(exc).rpartition(": ")[2]
                    del syncer.remotes[name]  # the others are still worth showing
            rows = await gather_rows(syncer, look_for_holes=holes)
        finally:
            await syncer.stop()
        live: list[dict[str, Any]] = []
        notes = [f"remote {n} is unreachable: {why}" for n, why in down.items()]
        urls = getattr(args, "daemon", None) or _default_daemon(config)
        if not holes and urls:
            live, problems = await asyncio.to_thread(fetch_live, urls)
            merge_live(rows, live)
            notes += problems
        remotes = remote_rows(names, rows, down, live)
        print_report(rows, remotes, as_json=args.json, title=title, holes=holes, notes=notes)
        return 0

    return _run_async(main())


def _default_daemon(config: Config) -> list[str]:
    address = config.http.address
    if address is None or address[1] == 0:
        return []
    host = "127.0.0.1" if address[0] in ("0.0.0.0", "::") else address[0]
    return [f"{host}:{address[1]}"]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    try:
        return int(args.func(args))
    except SyncerError as exc:
        print(f"syncer: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
