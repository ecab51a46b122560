"""`geotrain clusters plan NAME --model M`: which compression preset keeps the GPUs busy on this network."""

from __future__ import annotations

import argparse
import math

from core.domain import limits

from core.planner import wan_what_if as planner
from core.cli.output import dump_json, table
from core.errors import InvalidInput
from core.state.store import Store
from core.planner import dc_choice
from core.planner.cluster_inputs import DEFAULT_STEP_S, plan_for_cluster
from core.planner.streams import DEFAULT_WINDOW_BYTES, MAX_STREAMS, STREAMS_ENV, streams_from_env
from core.planner.datacenter_inputs import DEFAULT_STEPS, choose_for_cluster

MATRIX_HELP = ("YAML/JSON network matrix for what-if questions: `links:` then entries with src, dst, "
               "latency_ms, mbit_s (replaces the cluster's measured matrix)")


def _fraction(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"expected a fraction above 0 up to 1 like 0.95 or 95%, not {text[:40]!r}")
    return value


def register(groups) -> None:
    from core.domain import recipe_catalog  # reads the catalog only when the commands are built

    p = groups["clusters"].add_parser(
        "plan", help="estimate step time and GPU utilization per compression preset",
        description="Estimate, per compression preset, the time per step, the WAN's share of it and "
                    "the GPU utilization on a cluster's network; recommend the least compressed preset "
                    "that reaches the target utilization.")
    p.add_argument("name", nargs="?", default="local", help="cluster (default: local); ignored with --matrix",
                   complete="cluster")
    p.add_argument("--model", required=True, complete="model",
                   help=f"one of: {', '.join(recipe_catalog.models())}")
    p.add_argument("--size", complete="size", help="model size (default: the smallest real one)")
    p.add_argument("--step-time", type=limits.float_between(0, 86400, " s"), metavar="S",
                   help=f"measured compute seconds per step per worker (default {DEFAULT_STEP_S} s, assumed)")
    p.add_argument("--matrix", metavar="FILE", help=MATRIX_HELP)
    p.add_argument("--params", type=limits.int_between(1, 10**13), metavar="N", help="parameter count instead of the model's own")
    p.add_argument("--workers", type=limits.int_between(1, limits.MAX_WORKERS), metavar="N", help="workers in the ring (default: nodes in the matrix; "
                                                              "2 on local)")
    p.add_argument("--target", type=_fraction, default=planner.DEFAULT_TARGET,
                   help=f"utilization to reach (default {planner.DEFAULT_TARGET * 100:.0f}%%)")
    p.add_argument("--steps", type=limits.int_between(1, 10**9), metavar="N", default=DEFAULT_STEPS,
                   help=f"the run's length on every datacenter, to price dropping some (default {DEFAULT_STEPS})")
    p.add_argument("--streams", type=limits.int_between(1, MAX_STREAMS), metavar="N",
                   help=f"parallel TCP streams per peer the workers will use (default: ${STREAMS_ENV}, else 1); "
                        "a window-bound link's rate counts N times")
    p.add_argument("--window-kb", type=limits.int_between(16, 1 << 20), metavar="KB", default=DEFAULT_WINDOW_BYTES // 1024,
                   help="one TCP stream's largest window (default: Linux's tcp_rmem max, 6144 KB)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_plan)


def cmd_plan(args) -> int:
    store = Store() if args.matrix is None else None
    streams = {"streams": args.streams or streams_from_env(), "window_bytes": args.window_kb * 1024}
    result = plan_for_cluster(store, None if args.matrix else args.name,
                              args.model, args.size, step_time=args.step_time, matrix_file=args.matrix,
                              params=args.params, workers=args.workers, target=args.target, **streams)
    sites, no_choice = None, ""
    try:
        sites = choose_for_cluster(store, None if args.matrix else args.name, args.model, args.size,
                                   step_time=args.step_time, matrix_file=args.matrix, params=args.params,
                                   steps=args.steps, target=args.target, **streams)
    except InvalidInput as exc:
        if args.matrix:  # the file's own mistake: say it, as for its links
            raise
        no_choice = f"datacenters: no choice ({exc.message}; {exc.hint})"  # the preset table still holds
    if args.json:
        dump_json({**result.as_dict(), "datacenters": sites.as_dict() if sites else None})
        return 0
    net = result.network
    print(f"{net.workers} workers, bottleneck {net.mbit_s:g} Mbit/s, {net.latency_ms:g} ms; "
          f"{result.params:,} params; compute {result.compute_s:g} s/step"
          + ("" if args.step_time else " (assumed; pass --step-time)"))
    print(result.streams.describe())
    if result.figures is not None:
        print(result.figures.describe())
    rows = []
    for e in result.estimates:
        mark = "*" if e.preset == result.recommended else ""
        rows.append([mark + e.preset, e.algorithm, e.inner_steps, f"{e.wire_bytes_per_sync / 1e6:.3g}",
                     f"{e.sync_s:.3g}", f"{e.step_s:.3g}", f"{e.wan_share:.0%}", f"{e.utilization:.0%}",
                     f"{e.utilization_overlap:.0%}"])
    table(["preset", "algorithm", "H", "MB/sync", "sync s", "step s", "WAN", "util", "util overlap"], rows)
    print(f"recommended: {result.summary()}"
          + (" — set diloco.overlap: true" if result.overlap else ""))
    if result.tuned():
        print(f"  H={result.inner_steps}: the fewest inner steps (at least {planner.H_FLOOR}) that keep the target "
              "on this link; fewer inner steps reach DDP's loss in fewer steps")
    if result.overlap_note():
        print(f"  {result.overlap_note()}")
    if sites:
        _print_sites(sites)
    elif no_choice:
        print(no_choice)
    return 0


def _print_sites(sites) -> None:
    """The datacenter choice (hierarchical DiLoCo: one WAN exchange per datacenter)."""
    print()
    print(f"datacenters (hierarchical, {sites.steps:,} steps on all of them):")
    rows = []
    for choice in sites.choices[:8]:
        mark = "*" if choice == sites.best else ""
        rate = "-" if choice.mbit_s == float("inf") else f"{choice.mbit_s:g}"
        rows.append([mark + ",".join(choice.datacenters), choice.gpus, rate,
                     choice.preset + (" +overlap" if choice.overlap else ""), f"{choice.step_s:.3g}",
                     dc_choice.duration(choice.seconds)])
    if sites.everyone not in sites.choices[:8]:
        every = sites.everyone
        rows.append([",".join(every.datacenters), every.gpus, f"{every.mbit_s:g}", every.preset,
                     f"{every.step_s:.3g}", dc_choice.duration(every.seconds)])
    table(["datacenters", "GPUs", "slowest Mbit/s", "preset", "step s", "time"], rows)
    print(f"chosen: {sites.reason()}")
