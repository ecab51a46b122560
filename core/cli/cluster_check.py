"""`geotrain clusters check NAME`: a short burn-in of every device and an all-reduce of the size the
presets send (issue 43), on `local` (this machine as one node), on a cluster geotrain built over SSH
(every node; every pair of nodes over the mesh) and on a registered Kubernetes cluster (the Volcano
check job). Results kept in the state database (core.cluster_checks) and shown again with --last."""

from __future__ import annotations

import sys
import time

from core.cli.output import dump_json, table
from core.cluster_checks import SETTING, last_check, payload_bytes, run_check  # noqa: F401 (SETTING: app)
from core.domain import limits
from core.domain.terminal_text import printable
from core.errors import NotFound
from core.state.store import LOCAL_CLUSTER, Store


def register(groups) -> None:
    p = groups["clusters"].add_parser("check", help="burn in each device and time an all-reduce of the presets' size")
    p.add_argument("name", nargs="?", default=LOCAL_CLUSTER, complete="cluster", help="cluster (default: local)")
    p.add_argument("--seconds", type=limits.float_between(0.1, 600, " s"), default=3.0, metavar="S",
                   help="matmul burn-in per device (default 3 s)")
    p.add_argument("--model", default="gpt-neo", complete="model", help="whose payload to all-reduce (default gpt-neo)")
    p.add_argument("--size", complete="size", help="model size (default: the smallest real one)")
    p.add_argument("--preset", default="medium", help="whose exchange to size it by (default medium)")
    p.add_argument("--python", metavar="PATH", help="the nodes' Python with torch (default: python3 on the login "
                                                      "PATH, then /usr/bin/python3); SSH clusters only")
    p.add_argument("--last", action="store_true", help="show the last check's results, run nothing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_check)


def cmd_check(args) -> int:
    store = Store()
    if args.last:
        result = last_check(store, args.name)
        if result is None:
            raise NotFound(f"cluster {args.name!r} has not been checked", f"run `geotrain clusters check {args.name}`")
    else:
        progress = None if args.json else (lambda line: print(f"  {line}", file=sys.stderr, flush=True))
        result = run_check(store, args.name, seconds=args.seconds, model=args.model, size=args.size,
                           preset=args.preset, python=args.python, progress=progress)
    if args.json:
        dump_json(result)
    else:
        show(result)
    return 0 if result["ok"] else 1


def show(result: dict) -> None:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(result["checked_at"]))
    print(f"cluster {result['cluster']}, checked {when}: {'all good' if result['ok'] else 'PROBLEMS'}")
    rows = []
    for node in result["nodes"]:
        for d in node["devices"]:
            expected = "-" if not d["expected_flops"] else f"{d['expected_flops'] / 1e12:.0f}"
            memory = "-" if not d["memory_tested"] else f"{d['memory_tested'] / 2 ** 30:.1f} GiB, {d['memory_errors']} bad"
            rows.append([node["name"], d["rank"], d["device"], f"{d['matmul_flops'] / 1e12:.3g}", expected, memory,
                         "ok" if d["ok"] else "SLOW/BAD"])
    table(["node", "rank", "device", "matmul TFLOP/s", "datasheet", "memory test", "verdict"], rows)
    for node in result["nodes"]:
        for gpu in node["gpus"]:
            ecc = "no ECC" if gpu["ecc_uncorrected"] is None else f"ECC {gpu['ecc_corrected']} corrected, {gpu['ecc_uncorrected']} uncorrected"
            print(printable(f"  {node['name']} GPU {gpu['index']} {gpu['name']}: {ecc}, {gpu['temperature_c']} C"))
        for why in node["why"]:  # words from the node or its pod: never a terminal escape
            print(printable(f"  {node['name']}: {why}"))
        if node.get("burn_in"):
            print(printable(f"  {node['name']}: {node['burn_in']}"))
    if result["links"]:
        show_links(result)
    for line in result.get("notes") or []:
        print(f"note: {line}")


def _figure(value, scale: float, unit: str = "") -> str:
    return "-" if value is None else f"{value / scale:.3g}{unit}"


def show_links(result: dict) -> None:
    """Per link: the all-reduce's bus bandwidth beside the network matrix's ping and probe rate."""
    rows = []
    for link in result["links"]:
        measured = link.get("ok", True) is not None and link.get("bytes")
        verdict = "SLOW" if link.get("slow") else ("ok" if link.get("ok", True) else
                                                    ("not measured" if link.get("ok", True) is None else "FAILED"))
        if link.get("kind") == "datacenters" and link.get("ok"):
            verdict = f"slowest: {link['via']}"
        rows.append([link["name"], _figure(link["bytes"] if measured else None, 1e6),
                     _figure(link["seconds"] if measured else None, 1e-3), _figure(link["busbw"] if measured else None, 1e9),
                     _figure(link.get("ping_ms"), 1), _figure(link.get("probe_mbit_s"), 1), verdict])
    table(["link", "payload MB", "all-reduce ms", "bus GB/s", "ping ms", "probe Mbit/s", "verdict"], rows)
    for link in result["links"]:
        if link.get("why") and link.get("kind") != "datacenters":
            print(f"  {link['name']}: {link['why']}")
    if result.get("slow_link"):
        print(f"slow link: {result['slow_link']}")


def node_check(store: Store, node_name: str, cluster: str | None) -> tuple[dict, dict] | None:
    """(the cluster's last check, the node's part of it), for `nodes list/show`; None when never checked."""
    result = last_check(store, cluster) if cluster else None
    node = next((n for n in (result or {}).get("nodes", []) if n.get("name") == node_name), None)
    return (result, node) if node else None


def node_check_line(result: dict, node: dict) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(result["checked_at"]))
    verdict = "ok" if node["ok"] else "FAILED: " + "; ".join(node["why"])
    extra = f" ({node['burn_in']})" if node.get("burn_in") else ""
    return f"checked {when}: {verdict}{extra}"


def pair_busbw(result: dict | None) -> dict[tuple[str, str], float]:
    """The check's bus bandwidth per unordered node pair (both orders as keys), for `clusters show`."""
    found = {}
    for link in (result or {}).get("links", []):
        if link.get("kind") == "node" and link.get("ok"):
            found[(link["a"], link["b"])] = found[(link["b"], link["a"])] = link["busbw"]
    return found
