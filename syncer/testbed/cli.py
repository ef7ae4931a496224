"""``syncer testbed up|status|down|node|elect|reassign|leaders|demo``: the bed from the
command line. It registers itself on syncer's parser (``add_parser``) and answers for its own
errors: a ``TestbedError`` ends the command with one line and ``ExitCode.TESTBED``. The verbs
on one node or partition are ``ops``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NamedTuple

from rich.console import Console
from rich.table import Table

from syncer.testbed import demo as demo_cli
from syncer.testbed import ops
from syncer.testbed.bed import ClusterSpec, Testbed
from syncer.testbed.errors import TestbedError
from syncer.testbed.node import KRAFT, MODES, RunningCluster
from syncer.testbed.probe import probe_metadata


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("testbed", help="start and stop real Kafka clusters on loopback")
    verbs = parser.add_subparsers(dest="verb", required=True)
    up = verbs.add_parser("up", help="start clusters (KRaft, one node each unless NAME:N)")
    up.add_argument(
        "--clusters",
        required=True,
        help="comma-separated names, each with :N for N nodes, @VERSION for another Kafka"
        " version (one node; before 4.0 in ZooKeeper mode) and /kraft or /zookeeper for where it"
        " keeps its metadata (KRaft from 3.3, ZooKeeper before 4.0),"
        " e.g. local:3,east:3,old@2.8.2,mid@3.9.2/kraft",
    )
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
        help="listen on a fixed port instead of a free one (N nodes: PORT, PORT+1, ...)",
    )
    up.add_argument(
        "--replication-factor",
        action="append",
        default=[],
        metavar="NAME=RF",
        help="default replication factor of a cluster of several nodes (default 3)",
    )
    up.add_argument(
        "--min-insync-replicas",
        action="append",
        default=[],
        metavar="NAME=N",
        help="min.insync.replicas of a cluster of several nodes (default RF - 1)",
    )
    up.add_argument(
        "--auto-leader-rebalance",
        action="append",
        default=[],
        metavar="NAME",
        help="turn on the controller's periodic preferred-leader election (every 10 s)",
    )
    for verb, text in (("status", "show the clusters"), ("down", "stop every cluster")):
        p = verbs.add_parser(verb, help=text)
        p.add_argument("--state", required=True, type=Path)
        if verb == "status":
            p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ops.add_parsers(verbs)
    demo_cli.add_parser(verbs)
    parser.set_defaults(func=run)


def parse_clusters(text: str) -> list[tuple[str, int]]:
    """``local:3,east:3,west`` → ``[("local", 3), ("east", 3), ("west", 1)]`` (versions,
    ``@2.8.2``, are ``parse_versions``'s; modes, ``/kraft``, ``parse_modes``')."""
    return [(item.name, item.nodes) for item in _cluster_items(text)]


def parse_versions(text: str) -> dict[str, str]:
    """``old@2.8.2,local`` → ``{"old": "2.8.2"}``: the clusters that run another version."""
    return {item.name: item.version for item in _cluster_items(text) if item.version}


def parse_modes(text: str) -> dict[str, str]:
    """``mid@3.9.2/kraft,old@3.9.2`` → ``{"mid": "kraft"}``: the clusters whose mode is
    chosen (whether the version has it is the bed's to say, ``node.cluster_mode``)."""
    return {item.name: item.mode for item in _cluster_items(text) if item.mode}


class _ClusterItem(NamedTuple):
    name: str
    nodes: int
    version: str | None
    mode: str | None


def _cluster_items(text: str) -> list[_ClusterItem]:
    """Each ``NAME[:N][@VERSION][/MODE]`` of a --clusters list."""
    out: list[_ClusterItem] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        rest, slash, mode = item.partition("/")
        head, at, version = rest.partition("@")
        name, sep, count = head.partition(":")
        bad_count = sep and (not count.isdigit() or int(count) < 1)
        bad_version = at and not _is_version(version)
        bad_mode = slash and mode not in MODES
        if not name or bad_count or bad_version or bad_mode:
            raise SystemExit(
                f"syncer: --clusters wants NAME, NAME:N (N >= 1), NAME@VERSION (e.g. old@2.8.2)"
                f" or NAME@VERSION/MODE (MODE: {' or '.join(MODES)}), got {item!r}"
            )
        out.append(_ClusterItem(name, int(count) if sep else 1, version or None, mode or None))
    names = [item.name for item in out]
    if not names or len(set(names)) != len(names):
        raise SystemExit(f"syncer: --clusters wants distinct names, got {text!r}")
    return out


def _is_version(text: str) -> bool:
    parts = text.split(".")
    return len(parts) == 3 and all(p.isdigit() for p in parts)


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
    if args.verb in ops.VERBS:
        return ops.run(args)
    bed = Testbed.load(args.state)
    if args.verb == "down":
        bed.down()
        print(f"stopped {len(bed.clusters)} cluster(s) under {bed.state_dir}")
        return 0
    return _status(bed, as_json=args.json)


def _up(args: argparse.Namespace) -> int:
    wanted = parse_clusters(args.clusters)
    versions = parse_versions(args.clusters)
    modes = parse_modes(args.clusters)
    advertised = _pairs(args.advertise, "advertise")
    ports = {k: int(v) for k, v in _pairs(args.port, "port").items()}
    rfs = {k: int(v) for k, v in _pairs(args.replication_factor, "replication-factor").items()}
    isrs = {k: int(v) for k, v in _pairs(args.min_insync_replicas, "min-insync-replicas").items()}
    bed = (
        Testbed.load(args.state) if (args.state / "testbed.json").exists() else Testbed(args.state)
    )
    specs = [
        ClusterSpec(
            n,
            port=ports.get(n),
            advertised=advertised.get(n),
            nodes=count,
            replication_factor=rfs.get(n),
            min_insync_replicas=isrs.get(n),
            auto_leader_rebalance=n in args.auto_leader_rebalance,
            version=versions.get(n),
            mode=modes.get(n),
        )
        for n, count in wanted
    ]
    for cluster in bed.up(specs):
        print(f"{cluster.name}\t{cluster.bootstrap}\t{cluster.log_path}")
    return 0


def _status(bed: Testbed, *, as_json: bool) -> int:
    rows: list[dict[str, Any]] = []
    for cluster in bed.clusters.values():
        nodes = [_node_row(m) for m in cluster.members]
        rows.append(
            {
                "name": cluster.name,
                "version": getattr(cluster, "version", None) or bed.jars.version,
                "mode": getattr(cluster, "mode", KRAFT),  # a cluster of several is KRaft
                "bootstrap": cluster.bootstrap,
                "listen": cluster.listen,
                "pid": cluster.pid if nodes[0]["running"] else None,
                "running": all(n["running"] for n in nodes),
                "answers": all(n["answers"] for n in nodes),
                "log": str(cluster.log_path),
                "nodes": nodes,
            }
        )
    if as_json:
        print(json.dumps({"kafka_version": bed.jars.version, "clusters": rows}, indent=2))
    else:
        table = Table(title=f"Kafka {bed.jars.version} test bed · {bed.state_dir}")
        for column in (
            "cluster",
            "version",
            "mode",
            "node",
            "address",
            "rack",
            "pid",
            "state",
            "log",
        ):
            table.add_column(column)
        for row in rows:
            for node in row["nodes"]:
                state = "up" if node["answers"] else ("starting" if node["running"] else "down")
                table.add_row(
                    row["name"],
                    row["version"],
                    row["mode"],
                    str(node["id"]),
                    node["listen"],
                    node["rack"] or "-",
                    str(node["pid"] or "-"),
                    state,
                    node["log"],
                )
        Console().print(table)
    return 0 if all(r["answers"] for r in rows) else 1


def _node_row(node: RunningCluster) -> dict[str, Any]:
    running = node.is_running()
    return {
        "id": node.node_id,
        "listen": node.listen,
        "port": node.port,
        "rack": node.rack,
        "pid": node.pid if running else None,
        "running": running,
        "answers": running and probe_metadata(node.bootstrap, timeout=3.0),
        "log": str(node.log_path),
    }
