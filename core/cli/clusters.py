"""`geotrain clusters list|show`."""

from __future__ import annotations

import dataclasses

from core.cli.output import dump_json, table
from core.clusters import get_cluster, list_clusters
from core.store import Store


def register(groups) -> None:
    p = groups["clusters"].add_parser("list", help="list clusters (local is built in)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_list)
    p = groups["clusters"].add_parser("show", help="show one cluster")
    p.add_argument("name")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_show)


def cmd_list(args) -> int:
    clusters = list_clusters(Store())
    if args.json:
        dump_json([dataclasses.asdict(c) for c in clusters])
        return 0
    table(["name", "kind", "status", "nodes"],
          [[c.name, c.kind, c.status, ",".join(c.nodes) or ("this machine" if c.kind == "local" else "-")]
           for c in clusters])
    return 0


def cmd_show(args) -> int:
    cluster = get_cluster(Store(), args.name)
    data = dataclasses.asdict(cluster)
    if args.json:
        dump_json(data)
    else:
        for key, value in data.items():
            print(f"{key}: {value}")
    return 0
