"""The ``syncer`` command: thin; it builds a config and calls the library."""

from __future__ import annotations

import argparse
import logging
import sys

from syncer.errors import ExitCode, SyncerError
from syncer.testbed import cli as testbed_cli

log = logging.getLogger("syncer")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="syncer",
        description="Keep local Kafka partitions offset-for-offset identical to remote ones.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", required=True)
    testbed_cli.add_parser(sub)
    return parser


def setup_logging(verbosity: int) -> None:
    level = logging.DEBUG if verbosity > 1 else logging.INFO if verbosity else logging.WARNING
    logging.basicConfig(
        level=level, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    if verbosity < 2:
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


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
