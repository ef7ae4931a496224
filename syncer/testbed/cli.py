"""``syncer testbed up|status|down|demo``: the bed from the command line. It registers
itself on syncer's parser (``add_parser``) and answers for its own errors: a
``TestbedError`` ends the command with one line and ``ExitCode.TESTBED``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from syncer.testbed import demo as demo_cli
from syncer.testbed.bed import ClusterSpec, Testbed
from syncer.testbed.errors import TestbedError
from syncer.testbed.probe import probe_metadata


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("testbed", help="start and stop real Kafka clusters on loopback")
    verbs = parser.add_subparsers(dest="verb", required=True)
    up = verbs.add_parser("up", help="start clusters (KRaft, one node each)")
    up.add_argument("--clusters", required=True, help="comma-separated names, e.g. local,east")
    up.add_argument("--state", required=True, type=Path, help="directory for data and state")
    up.add_argument(
        "--advertise",
        action="append",
        default=[],
        metavar="NAME=HOST:PORT",
        help="advertise another address for a cluster (a proxy in front of it)",
    )
    up.add_argument(
        "--port",
        action="append",
        default=[],
        metavar="NAME=PORT",
        help="listen on a fixed port instead of a free one",
    )
    for verb, text in (("status", "show the clusters"), ("down", "stop every cluster")):
        p = verbs.add_parser(verb, help=text)
        p.add_argument("--state", required=True, type=Path)
        if verb == "status":
            p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    demo_cli.add_parser(verbs)
    parser.set_defaults(func=run)


def _pairs(values: list[str], what: str) -> dict[str, str]:
    out = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise SystemExit(f"syncer: --{what} wants NAME=VALUE, got {value!r}")
        out[name] = rest
    return out


def run(args: argparse.Namespace) -> int:
    try:
        return _dispatch(args)
    except TestbedError as exc:
        print(f"syncer: {exc}", file=sys.stderr)
        return exc.exit_code


def _dispatch(args: argparse.Namespace) -> int:
    if args.verb == "up":
        return _up(args)
    if args.verb == "demo":
        return demo_cli.run(args)
    bed = Testbed.load(args.state)
    if args.verb == "down":
        bed.down()
        print(f"stopped {len(bed.clusters)} cluster(s) under {bed.state_dir}")
        return 0
    return _status(bed, as_json=args.json)


def _up(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.clusters.split(",") if n.strip()]
    if not names or len(set(names)) != len(names):
        raise SystemExit(f"syncer: --clusters wants distinct names, got {args.clusters!r}")
    advertised = _pairs(args.advertise, "advertise")
    ports = {k: int(v) for k, v in _pairs(args.port, "port").items()}
    bed = (
        Testbed.load(args.state) if (args.state / "testbed.json").exists() else Testbed(args.state)
    )
    specs = [ClusterSpec(n, port=ports.get(n), advertised=advertised.get(n)) for n in names]
    for cluster in bed.up(specs):
        print(f"{cluster.name}\t{cluster.bootstrap}\t{cluster.log_path}")
    return 0


def _status(bed: Testbed, *, as_json: bool) -> int:
    rows: list[dict[str, Any]] = []
    for cluster in bed.clusters.values():
        running = cluster.is_running()
        answers = running and probe_metadata(cluster.bootstrap, timeout=3.0)
        rows.append(
            {
                "name": cluster.name,
                "bootstrap": cluster.bootstrap,
                "listen": cluster.listen,
                "pid": cluster.pid if running else None,
                "running": running,
                "answers": answers,
                "log": str(cluster.log_path),
            }
        )
    if as_json:
        print(json.dumps({"kafka_version": bed.jars.version, "clusters": rows}, indent=2))
    else:
        table = Table(title=f"Kafka {bed.jars.version} test bed · {bed.state_dir}")
        for column in ("cluster", "bootstrap", "pid", "state", "log"):
            table.add_column(column)
        for row in rows:
            state = "up" if row["answers"] else ("starting" if row["running"] else "down")
            table.add_row(row["name"], row["bootstrap"], str(row["pid"] or "-"), state, row["log"])
        Console().print(table)
    return 0 if all(r["answers"] for r in rows) else 1
