"""`geotrain clusters list|show`."""

from __future__ import annotations

import dataclasses
import time

from core.cli.cluster_check import pair_busbw
from core.cli.output import dump_json, table
from core.cluster_checks import last_check
from core.state.cluster_records import get_cluster, list_clusters, network_matrix
from core.state.store import Store


def register(groups) -> None:
    p = groups["clusters"].add_parser("list", help="list clusters (local is built in)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_list)
    p = groups["clusters"].add_parser("show", help="show one cluster")
    p.add_argument("name", complete="cluster")
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
    store = Store()
    cluster = get_cluster(store, args.name)
    data = dataclasses.asdict(cluster)
    matrix = network_matrix(store, args.name)
    data["network_matrix"] = [{"src": s, "dst": d, "latency_ms": lat, "mbit_s": bw}
                              for s, d, lat, bw in matrix]
    checked = last_check(store, args.name)
    data["last_check"] = checked
    if args.json:
        dump_json(data)
        return 0
    for key in ("name", "kind", "status", "nodes", "kubeconfig_path"):
        print(f"{key}: {data[key]}")
    busbw = pair_busbw(checked)
    if matrix:
        print("network (measured over the mesh; all-reduce from the last `clusters check`):")
        table(["from", "to", "latency ms", "mbit/s", "all-reduce bus GB/s"],
              [[s, d, "-" if lat is None else f"{lat:.2f}", "-" if bw is None else f"{bw:.0f}",
                f"{busbw[s, d] / 1e9:.3g}" if (s, d) in busbw else "-"] for s, d, lat, bw in matrix])
    if checked:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(checked["checked_at"]))
        failing = [f"{n['name']} ({'; '.join(n['why'])})" for n in checked["nodes"] if not n["ok"]]
        print(f"last check: {when}, {'all good' if checked['ok'] else 'PROBLEMS'}"
              + (f"; failing: {', '.join(failing)}" if failing else "")
              + (f"; slow link: {checked['slow_link']}" if checked.get("slow_link") else ""))
    else:
        print(f"last check: never (run `geotrain clusters check {args.name}`)")
    return 0
