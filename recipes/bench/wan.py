"""WAN benchmark: DDP and every preset across emulated datacenters joined by a shaped link.

    sudo python -m recipes.bench --wan --quick --json wan.json      # CI size, ~4 min on 2 cores
    sudo python -m recipes.bench.wan --size wan --steps 1000 --json wan.json
    sudo python -m recipes.bench.wan --size wan --steps 50 --rtt-ms 100 --window-kb 256 --methods ddp ddp-4streams
    sudo python -m recipes.bench --wan --quick --datacenters 3 --workers-per-dc 2 --methods ddp high --json w.json

Each datacenter is a network namespace (recipes/bench/netns.py) with one worker, or with
`--workers-per-dc M` M workers on its own LAN (the namespace's local routes, unshaped)
running hierarchical DiLoCo (`datacenters=K`: gradients all-reduced inside the
datacenter, the outer exchange between datacenters; DDP stays one flat ring). The
workers run `torchrun --rdzv-backend static` over gloo across the shaped links, every
method on the same step budget. Per method it reports the training loop's wall
time, the time until its smoothed training loss first reaches DDP's final one,
the bytes that crossed the datacenters' uplinks (interface counters, headers
included) and compute utilization (1 - network wait / loop time, per worker).
A method that ends the budget short of DDP's final loss gets a *reach run*: the same
method again with 2x (then 4x) the steps, its cosine schedule stretched to match,
timed until it first reaches that loss — wall-clock time to a target loss, which is
what a user buys; the equal-budget columns stay as measured.
Root only: namespaces and `tc` need it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recipes.bench import netns

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "recipes" / "configs" / "gpt-neo" / "tiny.yaml"
METHODS: dict[str, list[str]] = {
    "ddp": ["gradient_compression=none"],
    "low": ["gradient_compression=low"],
    "low-overlap": ["gradient_compression=low", "diloco.overlap=true"],
    "medium": ["gradient_compression=medium"],
    "high": ["gradient_compression=high"],
    "high-overlap": ["gradient_compression=high", "diloco.overlap=true"],
    "ultra": ["gradient_compression=ultra"],
    "ddp-4streams": ["gradient_compression=none"],
    "low-4streams": ["gradient_compression=low"],
}
METHOD_ENV = {"ddp-4streams": {"GEOTRAIN_WAN_STREAMS": "4"}, "low-4streams": {"GEOTRAIN_WAN_STREAMS": "4"}}
DEFAULT_METHODS = ["ddp", "low", "low-overlap", "medium", "high", "high-overlap", "ultra"]
QUICK_METHODS = ["ddp", "low", "low-overlap", "high", "high-overlap"]
SHARED = ["device=cpu", "dist.backend=gloo", f"dist.socket_ifname={netns.IFACE}",
          "data.source=markov", "data.markov_order=1", "data.markov_vocab=64", "data.markov_alpha=0.1",
          "data.batch_size=4", "data.seq_len=32", "optim.lr=0.003", "optim.warmup_steps=20",
          "logging.wandb=false", "checkpoint.every=0", "checkpoint.resume=false", "logging.log_every=10",
          "logging.eval_batches=4"]
SMOOTH = 5  # logged windows (of log_every steps) averaged when comparing losses
PORT = 29531
REACH_FACTORS = (2, 4)  # step budgets, as multiples of DDP's, tried for a method that did not reach


def worker_cmd(wan: netns.Wan, rank: int, overrides: list[str], per_dc: int = 1) -> list[str]:
    """The torchrun of datacenter `rank` (its `per_dc` workers are ranks rank*per_dc ...)."""
    return ["ip", "netns", "exec", wan.names[rank], sys.executable, "-m", "torch.distributed.run",
            "--nnodes", str(wan.datacenters), "--nproc-per-node", str(per_dc), "--node-rank", str(rank),
            "--rdzv-backend", "static", "--master-addr", wan.address(0), "--master-port", str(PORT),
            "-m", "recipes.bench.wan_worker", "--config", str(CONFIG), *SHARED, *overrides]


def worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "HF_TOKEN")}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), WANDB_MODE="disabled",
               GLOO_SOCKET_IFNAME=netns.IFACE)
    return env


def run_method(wan: netns.Wan, name: str, size: str, steps: int, workdir: Path, timeout: float,
               per_dc: int = 1) -> dict:
    """One real multi-datacenter run; returns its raw measurements."""
    out = workdir / f"{name}-{steps}"
    overrides = [*METHODS[name], f"size={size}", f"steps={steps}", f"out_dir={out}"]
    if per_dc > 1:
        overrides.append(f"datacenters={wan.datacenters}")
    before, before_dc = wan.tx_bytes(), wan.tx_bytes_per_dc()
    env = {**worker_env(), **METHOD_ENV.get(name, {})}
    procs = [subprocess.Popen(worker_cmd(wan, r, overrides, per_dc), cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(wan.datacenters)]
    logs = []
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            logs.append(proc.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise RuntimeError(f"{name}: workers still running after {timeout:.0f}s")
    if any(p.returncode for p in procs):
        raise RuntimeError(f"{name} failed:\n" + "\n".join(log[-3000:] for log in logs))
    stats = [json.loads((out / f"wan_stats.rank{r}.json").read_text()) for r in range(wan.datacenters * per_dc)]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    result = json.loads((out / "result.json").read_text())
    return {"stats": stats, "records": [r for r in records if "eval_loss" not in r], "result": result,
            "wan_bytes": wan.tx_bytes() - before,
            "wan_bytes_dc": [a - b for a, b in zip(wan.tx_bytes_per_dc(), before_dc)]}


def smoothed(records: list[dict]) -> list[tuple[int, float, float]]:
    """(step, time, trailing mean of the last SMOOTH logged losses) per record."""
    out = []
    for i, rec in enumerate(records):
        window = records[max(0, i - SMOOTH + 1):i + 1]
        out.append((rec["step"], rec["time"], sum(r["loss"] for r in window) / len(window)))
    return out


def first_reach(raw: dict, target: float, curve: list[tuple[int, float, float]] | None = None
                ) -> tuple[int, float] | None:
    """(step, seconds into the loop) where the smoothed training loss (`curve`, if already
    computed) first got to `target`."""
    start = raw["stats"][0]["loop_start"]
    curve = smoothed(raw["records"]) if curve is None else curve
    return next(((step, t - start) for step, t, loss in curve if loss <= target), None)


def summarize(raw: dict, target: float | None) -> dict:
    stats = raw["stats"]
    curve = smoothed(raw["records"])
    hit = first_reach(raw, target, curve) if target is not None else None
    reached = None if hit is None else hit[1]
    steps = raw["records"][-1]["step"]
    wall = max(s["loop_s"] for s in stats)
    compute = sum(s["loop_s"] - s["wait_s"] for s in stats) / len(stats)
    return {"wall_s": round(wall, 3), "time_to_ddp_loss_s": None if reached is None else round(reached, 3),
            "wan_bytes": raw["wan_bytes"], "payload_bytes": raw["result"]["bytes_sent"] * len(stats),
            "utilization": round(min(s["utilization"] for s in stats), 4),
            "step_s": round(wall / steps, 5), "compute_step_s": round(compute / steps, 5),
            "wait_s": round(max(s["wait_s"] for s in stats), 3), "steps": steps,
            "outer_steps": raw["result"]["outer_step"], "final_loss": round(curve[-1][2], 4),
            "eval_loss": round(raw["result"].get("eval_loss", float("nan")), 4), "params": stats[0]["params"],
            "entropy_floor": raw["result"].get("entropy_floor"), "reach_run_steps": None, "reach_step": None,
            # per datacenter: its uplink's counter (headers included) per outer step, mean over datacenters;
            # lan_bytes: what the workers' LAN wires counted (payload only; 0 without hierarchy)
            "wan_bytes_per_dc": round(sum(raw["wan_bytes_dc"]) / len(raw["wan_bytes_dc"])
                                      / max(1, raw["result"]["outer_step"])),
            "lan_bytes": sum(s.get("lan_bytes", 0) for s in stats),
            "utilization_with_lan": round(min(s.get("utilization_with_lan", s["utilization"]) for s in stats), 4)}


def reach(wan: netns.Wan, name: str, size: str, steps: int, target: float, workdir: Path, timeout: float,
          factors: tuple[int, ...], per_dc: int = 1) -> dict | None:
    """Longer runs of one method until one reaches `target`: its time, step and run length."""
    for factor in factors:
        print(f"running {name} for {factor * steps} steps to reach DDP's final loss ...", flush=True)
        raw = run_method(wan, name, size, factor * steps, workdir, timeout * factor, per_dc)
        hit = first_reach(raw, target)
        if hit is not None:
            return {"time_to_ddp_loss_s": round(hit[1], 3), "reach_step": hit[0], "reach_run_steps": factor * steps}
    return None


def print_table(report: dict) -> None:
    print(f"\nWAN bench: {report['datacenters']} datacenters x {report.get('workers_per_dc', 1)} workers, "
          f"{report['link_mbit']} Mbit/s per uplink, "
          f"RTT +{report['latency_ms']:g} ms, TCP window cap {report['window_kb'] or '-'} KB, "
          f"{report['steps']} steps, {report['params']:,} params; target = DDP's final loss "
          f"{report['target_loss']:.4f}")
    head = f"{'method':<13}{'wall s':>8}{'to DDP loss s':>15}{'speed-up':>10}{'WAN MB':>10}{'util':>7}" \
           f"{'step ms':>9}{'loss':>8}{'DDP to it s':>13}{'at equal loss':>15}"
    print(head)
    print("-" * len(head))
    ddp_time = report["methods"]["ddp"]["time_to_ddp_loss_s"]
    for name, m in report["methods"].items():
        reached = m["time_to_ddp_loss_s"]
        mark = "*" if m.get("reach_run_steps") else ""
        print(f"{name:<13}{m['wall_s']:>8.1f}{_seconds(reached) + mark:>15}{_ratio(ddp_time, reached):>10}"
              f"{m['wan_bytes'] / 1e6:>10.2f}{m['utilization']:>7.1%}"
              f"{1000 * m['step_s']:>9.1f}{m['final_loss']:>8.4f}{_seconds(m['ddp_time_to_this_loss_s']):>13}"
              f"{_ratio(m['ddp_time_to_this_loss_s'], m['wall_s']):>15}")
    print("per datacenter per outer step (uplink counters), and inside datacenters (LAN wires):")
    for name, m in report["methods"].items():
        if "wan_bytes_per_dc" in m:
            print(f"  {name:<13}WAN {m['wan_bytes_per_dc'] / 1e6:8.3f} MB/DC/outer step   "
                  f"LAN {m['lan_bytes'] / 1e6:9.2f} MB   util incl. LAN waits {m['utilization_with_lan']:.1%}")
    for name, m in report["methods"].items():
        if m.get("reach_run_steps"):
            print(f"* {name}: ended the {report['steps']}-step budget above DDP's final loss; a "
                  f"{m['reach_run_steps']}-step run of it reached that loss at step {m['reach_step']}")


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}"


def _ratio(numerator: float | None, denominator: float | None) -> str:
    return f"{numerator / denominator:.1f}x" if numerator and denominator else "-"


def run_bench(methods: list[str], size: str, steps: int, mbit: float, datacenters: int, timeout: float,
              rtt_ms: float = 0.0, window_kb: int = 0, reach_factors: tuple[int, ...] = REACH_FACTORS,
              per_dc: int = 1) -> dict:
    if "ddp" not in methods:
        methods = ["ddp", *methods]
    raws = {}
    wan_spec = netns.Wan(datacenters, mbit, rtt_ms, window_kb)
    with tempfile.TemporaryDirectory(prefix="gtwan-") as tmp, wan_spec as wan:
        for name in methods:
            print(f"running {name} ...", flush=True)
            raws[name] = run_method(wan, name, size, steps, Path(tmp), timeout, per_dc)
        ddp_curve = smoothed(raws["ddp"]["records"])
        target = ddp_curve[-1][2]
        summaries = {name: summarize(raw, target) for name, raw in raws.items()}
        for name, summary in summaries.items():
            if summary["time_to_ddp_loss_s"] is None and not name.startswith("ddp"):
                summary.update(reach(wan, name, size, steps, target, Path(tmp), timeout, reach_factors, per_dc) or {})
    for summary in summaries.values():
        # the equal-quality view: how long DDP took to get as low as this method ended
        hit = first_reach(raws["ddp"], summary["final_loss"], ddp_curve)
        summary["ddp_time_to_this_loss_s"] = None if hit is None else round(hit[1], 3)
    first = summaries["ddp"]
    return {"link_mbit": mbit, "datacenters": datacenters, "workers_per_dc": per_dc, "steps": steps,
            "params": first["params"],
            "model": f"gpt-neo/{size}", "target_loss": round(target, 4), "latency_ms": rtt_ms,
            "window_kb": window_kb, "reach_factors": list(reach_factors),
            "methods": summaries}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipes.bench.wan", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the CI size: fewer methods and steps")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--methods", nargs="*", help=f"subset of {', '.join(METHODS)}")
    parser.add_argument("--steps", type=int, help="steps per worker (default 150 quick, 400 full)")
    parser.add_argument("--size", choices=["wan", "wan-wide"], help="bench model (default wan quick, wan-wide full)")
    parser.add_argument("--mbit", type=float, default=50.0, help="rate of every datacenter uplink")
    parser.add_argument("--datacenters", type=int, default=2)
    parser.add_argument("--workers-per-dc", type=int, default=1, metavar="M",
                        help="workers in each datacenter, on its LAN (M > 1: hierarchical DiLoCo)")
    parser.add_argument("--rtt-ms", type=float, default=0.0,
                        help="round trip added between datacenters by a user-space delay line (0: none)")
    parser.add_argument("--window-kb", type=int, default=0,
                        help="cap TCP socket buffers in the datacenters (emulates a long fat link; 0: none)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per method")
    parser.add_argument("--reach-factors", type=int, nargs="*", default=list(REACH_FACTORS), metavar="K",
                        help="for a method short of DDP's final loss, retry with K x the steps to time it "
                             "reaching that loss (default 2 4; none: equal budget only)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("error: the WAN bench needs root (network namespaces and tc) — run it with sudo", file=sys.stderr)
        return 2
    methods = args.methods or (QUICK_METHODS if args.quick else DEFAULT_METHODS)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        print(f"error: unknown method(s) {', '.join(unknown)} — use some of {', '.join(METHODS)}", file=sys.stderr)
        return 2
    if args.workers_per_dc < 1 or args.datacenters < 2:
        print("error: use --datacenters 2 or more and --workers-per-dc 1 or more", file=sys.stderr)
        return 2
    steps = args.steps or (150 if args.quick else 400)
    size = args.size or ("wan" if args.quick else "wan-wide")
    if any(k < 2 for k in args.reach_factors):
        print("error: --reach-factors are whole multiples of the step budget, 2 or more", file=sys.stderr)
        return 2
    report = run_bench(methods, size, steps, args.mbit, args.datacenters, args.timeout, args.rtt_ms,
                       args.window_kb, tuple(args.reach_factors), args.workers_per_dc)
    print_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
