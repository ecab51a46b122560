"""`geotrain nodes …`: the node pool."""

from __future__ import annotations

import dataclasses

from core.cli.output import dump_json, table
from core.nodes import list_nodes
from core.store import Store


def register(groups) -> None:
    p = groups["nodes"].add_parser("list", help="list the nodes in the pool")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_list)


def _gpus(facts: dict) -> str:
    gpus = facts.get("gpus") or []
    return f"{len(gpus)}× {gpus[0].get('name', '?')}" if gpus else "-"


def cmd_list(args) -> int:
    nodes = list_nodes(Store())
    if args.json:
        dump_json([dataclasses.asdict(n) for n in nodes])
        return 0
    if not nodes:
        print("No nodes yet. Import one with `geotrain nodes import-ssh --name N --endpoint HOST "
              "--username U --ssh-key-path KEY`; the built-in `local` cluster needs none.")
        return 0
    table(["name", "endpoint", "datacenter", "status", "gpus", "cluster"],
          [[n.name, f"{n.username}@{n.host}:{n.port}", n.datacenter or "-", n.status,
            _gpus(n.facts), n.cluster or "-"] for n in nodes])
    return 0
