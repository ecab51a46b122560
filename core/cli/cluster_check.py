"""`geotrain clusters check NAME`: a short burn-in of every device and an all-reduce of the size the
presets send (issue 43); results kept in the state database and shown again with --last. On
`local` only so far (this machine as one node)."""

from __future__ import annotations

import json
import time

from core.cli.output import dump_json, table
from core.domain import limits
from core.errors import InvalidInput, NotFound
from core.state.store import LOCAL_CLUSTER, Store

SETTING = "cluster_check/{}"


def register(groups) -> None:
    p = groups["clusters"].add_parser("check", help="burn in each device and time an all-reduce of the presets' size")
    p.add_argument("name", nargs="?", default=LOCAL_CLUSTER, complete="cluster", help="cluster (default: local)")
    p.add_argument("--seconds", type=limits.float_between(0.1, 600, " s"), default=3.0, metavar="S",
                   help="matmul burn-in per device (default 3 s)")
    p.add_argument("--model", default="gpt-neo", complete="model", help="whose payload to all-reduce (default gpt-neo)")
    p.add_argument("--size", complete="size", help="model size (default: the smallest real one)")
    p.add_argument("--preset", default="medium", help="whose exchange to size it by (default medium)")
    p.add_argument("--last", action="store_true", help="show the last check's results, run nothing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_check)


def payload_bytes(model: str, size: str | None, preset: str) -> int:
    """What one rank hands the collective per sync for the model under the preset (the planner's figure)."""
    from core.domain import recipe_catalog
    from core.planner.cluster_inputs import default_size, model_params
    from core.planner.wan_what_if import exchange_for

    recipe_catalog.check_choice("preset", preset, list(recipe_catalog.presets()), "--preset")
    params = model_params(model, size or default_size(model))
    return exchange_for(recipe_catalog.presets()[preset], params).payload_bytes


def cmd_check(args) -> int:
    store = Store()
    if args.last:
        saved = store.get_setting(SETTING.format(args.name))
        if saved is None:
            raise NotFound(f"cluster {args.name!r} has not been checked", f"run `geotrain clusters check {args.name}`")
        result = json.loads(saved)
    else:
        from core.state.cluster_records import get_cluster

        cluster = get_cluster(store, args.name)
        if cluster.kind != "local" and args.name != LOCAL_CLUSTER:
            raise InvalidInput(f"clusters check runs on {LOCAL_CLUSTER!r} only so far; {args.name!r} is a "
                               f"{cluster.kind} cluster", f"run `geotrain clusters check {LOCAL_CLUSTER}`")
        from core.backends.local.cluster_check import check_local

        result = check_local(args.seconds, payload_bytes(args.model, args.size, args.preset))
        store.set_setting(SETTING.format(args.name), json.dumps(result))
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
            print(f"  {node['name']} GPU {gpu['index']} {gpu['name']}: {ecc}, {gpu['temperature_c']} C")
        for why in node["why"]:
            print(f"  {node['name']}: {why}")
    if result["links"]:
        table(["link", "payload MB", "all-reduce ms", "bus GB/s"],
              [[link["name"], f"{link['bytes'] / 1e6:.3g}", f"{link['seconds'] * 1000:.3g}", f"{link['busbw'] / 1e9:.3g}"]
               for link in result["links"]])
