"""The datacenter planner's predictions, and (root) a WAN-bench check of a choice it makes.

    python -m tests.planner.bench_dc_choice                      # predictions, three what-if matrices
    sudo python -m tests.planner.bench_dc_choice --measure --json dc.json   # ~2 min on 2 cores

`--measure` builds the bench's emulated datacenters (recipes/bench/netns.py, one worker
each, gpt-neo/wan on gloo): three datacenters whose third sits behind a slow uplink, and
the two good ones alone. Both runs train on the same data (the two run 3/2 the steps each);
the planner, given the measured compute seconds per step and parameter count, predicts each
loop's wall time and which finishes first. A tool, not a test: nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from core.domain import recipe_catalog
from core.planner import dc_choice
from core.planner.datacenter_inputs import choose_for_cluster

WHAT_IF = Path(__file__).resolve().parent / "what_if"
MATRICES = ("even", "bad_link", "far_site")
NETNS_PREFIX = "gtdc-"


def predictions(model: str, size: str, step_time: float, steps: int) -> dict:
    """The planner on each what-if matrix: every set of datacenters, fastest first."""
    out = {}
    for name in MATRICES:
        result = choose_for_cluster(None, None, model, size, step_time=step_time,
                                    matrix_file=WHAT_IF / f"{name}.yaml", steps=steps)
        out[name] = result.as_dict()
        print(f"\n{name}.yaml ({model}/{size}, {step_time:g} s/step, {steps:,} steps on all):")
        for choice in result.choices:
            mark = "*" if choice == result.best else " "
            print(f"  {mark} {','.join(choice.datacenters):<16} {choice.gpus:>3} GPUs  "
                  f"{choice.preset + (' +overlap' if choice.overlap else ''):<16} "
                  f"{dc_choice.duration(choice.seconds):>8}")
        print(f"  chosen: {result.reason()}")
    return out


def _run(wan, method: str, steps: int, workdir: Path, timeout: float, per_dc: int) -> dict:
    from recipes.bench import wan as bench

    summary = bench.summarize(bench.run_method(wan, method, "wan", steps, workdir, timeout, per_dc), None)
    return {k: summary[k] for k in ("wall_s", "step_s", "compute_step_s", "wait_s", "steps", "params",
                                    "wan_bytes", "final_loss")}


def measure(method: str, steps: int, good: float, bad: float, timeout: float, per_dc: int = 1) -> dict:
    """Three datacenters (the third behind `bad` Mbit/s) against the two good ones alone;
    `per_dc` workers in each (more than one: hierarchical DiLoCo, as the planner prices)."""
    from recipes.bench import netns

    runs = {}
    with tempfile.TemporaryDirectory(prefix="gtdc-") as tmp:
        with netns.Wan(3, good) as wan:
            netns.shape(wan.names[2], netns.IFACE, bad)  # dc2's uplink, both ends
            netns.shape(netns.HUB, "h2", bad)
            print(f"running {method}: 3 datacenters, dc2 at {bad:g} Mbit/s, {steps} steps ...", flush=True)
            runs["all"] = _run(wan, method, steps, Path(tmp), timeout, per_dc)
        with netns.Wan(2, good) as wan:
            print(f"running {method}: 2 datacenters at {good:g} Mbit/s, {steps * 3 // 2} steps ...", flush=True)
            runs["two"] = _run(wan, method, steps * 3 // 2, Path(tmp), timeout, per_dc)
    params, compute = runs["two"]["params"], runs["two"]["compute_step_s"]
    # one worker per datacenter exchanges flat: for an all-reduce preset (low) the same
    # 2(K-1)/K of a payload as the hierarchical exchange the planner prices (per_dc > 1)
    sites = [dc_choice.Site(n, per_dc) for n in ("dc0", "dc1", "dc2")]
    links = {("dc0", "dc1"): dc_choice.SiteLink(good, 0.0), ("dc0", "dc2"): dc_choice.SiteLink(bad, 0.0),
             ("dc1", "dc2"): dc_choice.SiteLink(bad, 0.0)}
    preset = method.removesuffix("-overlap")
    plan = dc_choice.choose(sites, links, {preset: recipe_catalog.presets()[preset]}, params, compute, steps,
                            overlap=method.endswith("-overlap"))
    priced = {c.datacenters: c for c in plan.choices}
    runs["all"]["predicted_s"] = priced[("dc0", "dc1", "dc2")].seconds
    runs["two"]["predicted_s"] = priced[("dc0", "dc1")].seconds
    report = {"method": method, "workers_per_dc": per_dc, "good_mbit": good, "bad_mbit": bad, "steps_on_all": steps,
              "planner_choice": list(plan.best.datacenters), "planner_reason": plan.reason(), "runs": runs}
    for name, run in runs.items():
        print(f"  {name:<7} predicted {run['predicted_s']:7.1f} s  measured {run['wall_s']:7.1f} s  "
              f"({run['steps']} steps, compute {run['compute_step_s'] * 1000:.1f} ms/step, "
              f"waited {run['wait_s']:.1f} s, WAN {run['wan_bytes'] / 1e6:.2f} MB)")
    faster = "the two" if runs["two"]["wall_s"] < runs["all"]["wall_s"] else "all three"
    print(f"  planner: {plan.reason()}\n  measured: {faster} finished the same data first")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.planner.bench_dc_choice", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-neo")
    parser.add_argument("--size", default="1.3b")
    parser.add_argument("--step-time", type=float, default=0.8)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--measure", action="store_true", help="run the WAN bench check (root)")
    parser.add_argument("--method", default="low", help="preset the bench runs (default low)")
    parser.add_argument("--bench-steps", type=int, default=160, help="steps per worker with all three")
    parser.add_argument("--good-mbit", type=float, default=50.0)
    parser.add_argument("--bad-mbit", type=float, default=5.0)
    parser.add_argument("--workers-per-dc", type=int, default=1,
                        help="workers in each datacenter (2 or more: hierarchical DiLoCo)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    report = {"predictions": predictions(args.model, args.size, args.step_time, args.steps)}
    if args.measure:
        if os.geteuid() != 0:
            print("error: --measure needs root (network namespaces and tc): run it with sudo", file=sys.stderr)
            return 2
        from recipes.bench import netns

        # namespaces of our own (the WAN bench's teardown deletes every gtwan-*, ours included)
        netns.PREFIX, netns.HUB = NETNS_PREFIX, NETNS_PREFIX + "hub"
        if netns.our_namespaces():  # up() tears them down: never under another run's feet
            print(f"error: {', '.join(netns.our_namespaces())} exist: another bench_dc_choice is running; "
                  "try again when it ends", file=sys.stderr)
            return 2
        report["measured"] = measure(args.method, args.bench_steps, args.good_mbit, args.bad_mbit, args.timeout,
                                     args.workers_per_dc)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
