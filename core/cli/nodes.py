"""`geotrain nodes …`: the node pool — import servers over SSH, list, show, refresh, remove."""

from __future__ import annotations

import dataclasses
import re
import sys

from core.domain import describe, limits
from core.cli import prompts
from core.cli.output import dump_json, table
from core.errors import InvalidInput
from core.domain.records import Node
from core.domain.terminal_text import printable
from core.nodes.facts import listening
from core.nodes.import_file import read_import_file
from core.nodes.pool import ImportRequest, NodePool, Prompts
from core.schema.endpoints import parse_endpoint
from core.nodes.ssh_config import ssh_config_host


_seconds = limits.float_between(0, limits.MAX_TIMEOUT_S, " seconds")  # inf/nan refused: OverflowError later


def register(groups) -> None:
    nodes = groups["nodes"]
    p = nodes.add_parser("list", help="list the nodes in the pool")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_list)

    p = nodes.add_parser("show", help="everything known about one node")
    p.add_argument("name", complete="node")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_show)

    p = nodes.add_parser("import-ssh", help="import one server over SSH")
    p.add_argument("--name", required=True, help="node name (lowercase letters, digits, dashes)")
    p.add_argument("--endpoint", required=True, metavar="HOST[:PORT]")
    p.add_argument("--username", required=True)
    p.add_argument("--ssh-key-path", metavar="PATH", help="private key (default: the SSH agent)")
    _common_import_args(p)
    p.set_defaults(handler=cmd_import_ssh)

    p = nodes.add_parser("import", help="import several servers at once (all or none)")
    p.add_argument("file", nargs="?", help="YAML or CSV file listing the servers")
    p.add_argument("--from-ssh-config", nargs="+", metavar="ALIAS", help="Host aliases of ~/.ssh/config")
    p.add_argument("--ssh-config", metavar="PATH", help="SSH config file (default ~/.ssh/config)")
    _common_import_args(p)
    p.set_defaults(handler=cmd_import)

    p = nodes.add_parser("refresh", help="gather facts again (all nodes when none named)")
    p.add_argument("names", nargs="*", metavar="NAME", complete="node")
    p.add_argument("--trust-host-key", action="append", default=[], metavar="SHA256:…",
                   help="re-pin a reinstalled server whose new key has this fingerprint")
    p.add_argument("--connect-timeout", type=_seconds, default=10.0, metavar="SECONDS",
                   help="mark a server UNREACHABLE when it does not answer within this")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_refresh)

    p = nodes.add_parser("remove", help="remove a node from the pool (the server is untouched)")
    p.add_argument("name", complete="node")
    p.set_defaults(handler=cmd_remove)

    for verb, doing in (("cordon", "keep new pods off a node (Kubernetes/k3s clusters; running pods stay)"),
                        ("uncordon", "let pods be scheduled on a cordoned node again")):
        p = nodes.add_parser(verb, help=doing)
        p.add_argument("name", help="the node's name in its cluster")
        p.add_argument("--cluster", complete="cluster", help="its cluster (default: the one cluster listing it)")
        p.set_defaults(handler=cmd_cordon if verb == "cordon" else cmd_uncordon)


def _common_import_args(p) -> None:
    p.add_argument("--jump", metavar="[USER@]HOST[:PORT]", help="reach the server through this host")
    p.add_argument("--datacenter", metavar="DC", help="datacenter or region label")
    p.add_argument("--trust-host-key", action="append", default=[], metavar="SHA256:…",
                   help="host key fingerprint to trust without asking (repeatable)")
    p.add_argument("--connect-timeout", type=_seconds, default=10.0, metavar="SECONDS",
                   help="give up on a server that does not answer within this (default 10)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def check_fingerprints(values: list[str]) -> set[str]:
    """--trust-host-key values, each a SHA256 fingerprint as ssh-keygen -l shows it."""
    for fp in values:
        if not re.fullmatch(r"SHA256:[A-Za-z0-9+/]{43}", fp):
            raise InvalidInput(f"--trust-host-key {fp!r} is not a SHA256 fingerprint",
                               "copy it as shown, e.g. SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s")
    return set(values)


def _pool(args) -> NodePool:
    check_fingerprints(getattr(args, "trust_host_key", []))
    return NodePool(prompts=Prompts(confirm_host_key=prompts.confirm_host_key,
                                    ask_passphrase=prompts.ask_passphrase,
                                    trusted=set(getattr(args, "trust_host_key", []))),
                    connect_timeout=getattr(args, "connect_timeout", 10.0))


def _print_nodes(nodes: list[Node], as_json: bool) -> None:
    if as_json:
        dump_json([dataclasses.asdict(n) for n in nodes])
        return
    table(["name", "endpoint", "datacenter", "status", "gpus", "cpu", "mem", "cluster"],
          [[n.name, describe.endpoint(n), *describe.node_table_row(n, none="-"), n.cluster or "-"]
           for n in nodes])
    from core.cli.cluster_check import node_check, node_check_line
    from core.state.store import Store

    store = Store()
    for n in nodes:
        for reason in n.blockers:
            print(printable(f"  {n.name}: {reason}"))  # built from the server's facts
        checked = node_check(store, n.name, n.cluster)
        if checked and not checked[1]["ok"]:
            print(printable(f"  {n.name}: {node_check_line(*checked)}"))


def cmd_list(args) -> int:
    nodes = NodePool().list()
    if not nodes and not args.json:
        print("No nodes yet. Import one with `geotrain nodes import-ssh --name N --endpoint HOST "
              "--username U --ssh-key-path KEY`; the built-in `local` cluster needs none.")
        return 0
    _print_nodes(nodes, args.json)
    return 0


def cmd_show(args) -> int:
    node = NodePool().show(args.name)
    if args.json:
        dump_json(dataclasses.asdict(node))
        return 0
    port_taken = listening.holders(node.facts.get("listening", []), "udp", 51820)
    rows = describe.node_detail_rows(node, "in use" if port_taken else "free")
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}")
    for reason in node.blockers:
        print(f"{'blocker'.ljust(width)}  {printable(reason)}")
    from core.cli.cluster_check import node_check, node_check_line
    from core.state.store import Store

    checked = node_check(Store(), node.name, node.cluster)
    if checked:
        print(f"{'check'.ljust(width)}  {printable(node_check_line(*checked))}")
    return 0


def cmd_import_ssh(args) -> int:
    user, host, port = parse_endpoint(args.endpoint, args.username)
    request = ImportRequest(name=args.name, host=host, port=port, username=user or args.username,
                            key_path=args.ssh_key_path, jump=args.jump, datacenter=args.datacenter)
    _print_nodes(_pool(args).import_nodes([request]), args.json)
    return 0


def _requests_from_ssh_config(args) -> list[ImportRequest]:
    requests, notes = [], []
    for alias in args.from_ssh_config:
        entry = ssh_config_host(alias, args.ssh_config, notes)
        if not entry["user"]:
            raise InvalidInput(f"~/.ssh/config Host {alias} has no User",
                               f"add `User NAME` under `Host {alias}`")
        requests.append(ImportRequest(
            name=re.sub(r"[^a-z0-9-]", "-", alias.lower()).strip("-")[:32], host=entry["hostname"],
            port=entry["port"], username=entry["user"], key_path=entry["key_path"],
            jump=args.jump or entry["jump"], datacenter=args.datacenter,
            source=f"ssh config Host {alias}"))
    for note in dict.fromkeys(notes):  # the same file read for each alias: said once
        print(f"note: {note}", file=sys.stderr)
    return requests


def cmd_import(args) -> int:
    if bool(args.file) == bool(args.from_ssh_config):
        raise InvalidInput("give either an import FILE or --from-ssh-config ALIAS…",
                           "e.g. `geotrain nodes import servers.yaml`")
    if args.file:
        requests = read_import_file(args.file)
        for req in requests:
            req.jump = req.jump or args.jump
            req.datacenter = req.datacenter or args.datacenter
    else:
        requests = _requests_from_ssh_config(args)
    _print_nodes(_pool(args).import_nodes(requests), args.json)
    return 0


def cmd_refresh(args) -> int:
    nodes = _pool(args).refresh(args.names or None)
    _print_nodes(nodes, args.json)
    return 1 if any(n.status == "UNREACHABLE" for n in nodes) else 0


def cmd_remove(args) -> int:
    node = NodePool().remove(args.name)
    print(f"removed node {node.name} from the pool (the server itself was not changed)")
    return 0


def cmd_cordon(args, cordon: bool = True) -> int:
    from core.kubernetes.cordon import set_cordon
    from core.state.store import Store

    print(set_cordon(Store(), args.name, cordon, args.cluster).sentence())
    return 0


def cmd_uncordon(args) -> int:
    return cmd_cordon(args, cordon=False)
