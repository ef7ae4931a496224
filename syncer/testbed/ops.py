"""``syncer testbed node|elect|reassign|leaders|fill``: what an operator does to one node or
one partition of a running bed — stop a node cleanly, kill -9 it, start it again; move leaders
with Kafka's own preferred election and reassignment tools; see who leads what — and sample
records to copy (what the README's tour writes into its remote)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from syncer.testbed.bed import Testbed
from syncer.testbed.demo import fill
from syncer.testbed.errors import TestbedError
from syncer.testbed.probe import placements

VERBS = ("node", "elect", "reassign", "leaders", "fill")


def add_parsers(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    node = verbs.add_parser("node", help="stop, kill -9 or start one node of a cluster")
    node.add_argument("action", choices=("stop", "kill", "start"))
    node.add_argument("cluster")
    node.add_argument("node_id", type=int, metavar="NODE")
    elect = verbs.add_parser("elect", help="preferred leader election (kafka-leader-election)")
    elect.add_argument("cluster")
    elect.add_argument("--topic", required=True)
    elect.add_argument(
        "--partition", type=int, action="append", help="one partition (repeat; default all)"
    )
    move = verbs.add_parser("reassign", help="move a partition (kafka-reassign-partitions)")
    move.add_argument("cluster")
    move.add_argument("--topic", required=True)
    move.add_argument("--partition", type=int, required=True)
    move.add_argument(
        "--replicas", required=True, help="the new replicas, preferred leader first: 3,2,1"
    )
    leaders = verbs.add_parser("leaders", help="each partition's leader, replicas and ISR")
    leaders.add_argument("cluster")
    leaders.add_argument("--topic", required=True)
    fill = verbs.add_parser("fill", help="write sample records into a topic (created if missing)")
    fill.add_argument("cluster")
    fill.add_argument("--topic", required=True)
    fill.add_argument("--partitions", type=positive, default=4, help="if the topic is created")
    fill.add_argument("--records", type=positive, default=10_000)
    fill.add_argument("--record-size", type=positive, default=1024, help="bytes (default 1024)")
    for parser in (node, elect, move, leaders, fill):
        parser.add_argument("--state", required=True, type=Path)


def positive(text: str) -> int:
    """An argparse type: a count that must be at least 1 (usage error, exit 2, otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_replicas(text: str) -> list[int]:
    """``3,2,1`` → ``[3, 2, 1]``: distinct node ids."""
    try:
        replicas = [int(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise SystemExit(f"syncer: --replicas wants node ids like 3,2,1, got {text!r}") from None
    if not replicas or len(set(replicas)) != len(replicas):
        raise SystemExit(f"syncer: --replicas wants distinct node ids, got {text!r}")
    return replicas


def run(args: argparse.Namespace) -> int:
    bed = Testbed.load(args.state)
    if args.verb == "node":
        action = {"stop": bed.stop_node, "kill": bed.kill_node, "start": bed.start_node}
        action[args.action](args.cluster, args.node_id)
        print(f"{args.cluster} node {args.node_id}: {args.action} done")
        return 0
    if args.verb == "fill":
        fill(
            bed,
            args.cluster,
            args.topic,
            args.partitions,
            args.records,
            record_size=args.record_size,
        )
        return 0
    if args.cluster not in bed.clusters:
        raise TestbedError(f"no cluster {args.cluster!r} in {bed.state_path}")
    bootstrap = bed.clusters[args.cluster].direct
    if args.verb == "elect":
        chosen = args.partition or [p.partition for p in placements(bootstrap, args.topic)]
        print(bed.elect_preferred(args.cluster, [(args.topic, p) for p in chosen]).strip())
        return 0
    if args.verb == "reassign":
        replicas = parse_replicas(args.replicas)
        bed.reassign(args.cluster, {(args.topic, args.partition): replicas})
        print(f"{args.topic}-{args.partition}: replicas now {replicas}")
        return 0
    rows = [
        {"partition": p.partition, "leader": p.leader, "replicas": p.replicas, "isr": p.isr}
        for p in placements(bootstrap, args.topic)
    ]
    print(json.dumps(rows))
    return 0
