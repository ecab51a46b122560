"""Datacenter-aware DiLoCo, measured: WAN bytes per datacenter per outer step, and loss.

    python -m recipes.bench.hierarchy [--quick] [--json OUT]

Real runs on gloo on this machine, ranks started as a local workspace starts them (no
shaping needed: the byte counters of the recipes' wires are exact; what crosses datacenters is `bytes_sent`, what stays
inside one is `lan_bytes`, recipes/algorithms/hierarchical.py). Three tables:

1. K=2 datacenters with 1, 2 and 4 workers each, hierarchical against flat DiLoCo over
   the same workers (a "datacenter" of the flat run = its M consecutive ranks);
2. K=4 against K=2 datacenters of one worker each;
3. 2 datacenters x 2 workers against flat 4-worker DiLoCo, same preset and steps:
   WAN bytes and held-out loss.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

from recipes.bench.local_group import run_ranks

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "recipes" / "configs" / "gpt-neo" / "tiny.yaml"
SHARED = ["device=cpu", "dist.backend=gloo", "logging.wandb=false", "checkpoint.every=0",
          "checkpoint.resume=false", "logging.log_every=50"]
DONE = re.compile(r"\[rank (\d+)\] done (.*)")


def run(workers: int, datacenters: int, overrides: list[str], out: Path, timeout: float = 900) -> dict:
    """One run; per rank: bytes_sent (WAN), lan_bytes, outer_step, eval_loss."""
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "HF_TOKEN")}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), WANDB_MODE="disabled")
    proc = run_ranks(["--config", str(CONFIG), *SHARED, *overrides, f"datacenters={datacenters}",
                      f"out_dir={out}"], workers, env, REPO, timeout)
    if proc.returncode:
        raise RuntimeError(f"{workers} workers / {datacenters} datacenters failed:\n{proc.stdout[-2000:]}"
                           f"{proc.stderr[-2000:]}")
    ranks = {}
    for match in DONE.finditer(proc.stdout):
        words = match.group(2).split()
        ranks[int(match.group(1))] = {k: float(v) for k, v in zip(words[::2], words[1::2])}
    return ranks


def per_dc(ranks: dict, size: int) -> float:
    """Mean over datacenters (groups of `size` consecutive ranks) of WAN bytes per outer step."""
    count = len(ranks) // size
    outer = ranks[0]["outer_step"]
    totals = [sum(ranks[d * size + j]["bytes_sent"] for j in range(size)) for d in range(count)]
    return sum(totals) / count / outer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipes.bench.hierarchy", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (the CI size)")
    parser.add_argument("--preset", default="high", help="gradient_compression preset (default high)")
    parser.add_argument("--loss-steps", type=int, help="steps of the loss comparison (default 200 quick, 600)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    preset = [f"gradient_compression={args.preset}"]
    small = [*preset, "diloco.inner_steps=4", "steps=8", "data.batch_size=2", "data.seq_len=16",
             "logging.eval_batches=1"]
    report: dict = {"preset": args.preset, "scaling": [], "datacenters": []}
    with tempfile.TemporaryDirectory(prefix="gthier-") as tmp:
        work = Path(tmp)
        for m in (1, 2, 4):
            print(f"2 datacenters x {m} worker(s): hierarchical and flat ...", flush=True)
            hier = run(2 * m, 2, small, work / f"h{m}")
            flat = run(2 * m, 1, small, work / f"f{m}")
            report["scaling"].append({"workers_per_dc": m, "hierarchical_wan_bytes_per_dc": per_dc(hier, m),
                                      "flat_wan_bytes_per_dc": per_dc(flat, m),
                                      "hierarchical_lan_bytes": sum(r.get("lan_bytes", 0) for r in hier.values())})
        for k in (2, 4):
            print(f"{k} datacenters x 1 worker ...", flush=True)
            report["datacenters"].append({"datacenters": k, "wan_bytes_per_dc": per_dc(run(k, k, small, work / f"k{k}"), 1)})
        steps = args.loss_steps or (200 if args.quick else 600)
        print(f"2 x 2 hierarchical and flat 4 workers, {steps} steps ...", flush=True)
        loss_run = [*preset, f"steps={steps}", "logging.eval_batches=8"]
        hier, flat = run(4, 2, loss_run, work / "lh"), run(4, 1, loss_run, work / "lf")
        report["versus_flat"] = {
            "steps": steps, "hierarchical_wan_bytes": sum(r["bytes_sent"] for r in hier.values()),
            "flat_wan_bytes": sum(r["bytes_sent"] for r in flat.values()),
            "hierarchical_lan_bytes": sum(r.get("lan_bytes", 0) for r in hier.values()),
            "hierarchical_eval_loss": hier[0]["eval_loss"], "flat_eval_loss": flat[0]["eval_loss"]}
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def print_report(report: dict) -> None:
    print(f"\nWAN bytes per datacenter per outer step, preset {report['preset']} (recipes' byte counters)")
    print(f"{'workers/DC':>10}{'hierarchical':>14}{'flat':>14}{'LAN (all)':>14}")
    for row in report["scaling"]:
        print(f"{row['workers_per_dc']:>10}{row['hierarchical_wan_bytes_per_dc']:>14,.0f}"
              f"{row['flat_wan_bytes_per_dc']:>14,.0f}{row['hierarchical_lan_bytes']:>14,.0f}")
    k2, k4 = (row["wan_bytes_per_dc"] for row in report["datacenters"])
    print(f"K=2: {k2:,.0f}  K=4: {k4:,.0f}  ratio {k4 / k2:.3f} (2(K-1)/K: 1.5; an all-gather: 3)")
    v = report["versus_flat"]
    print(f"2 DC x 2 vs flat 4, {v['steps']} steps: WAN {v['hierarchical_wan_bytes']:,.0f} vs "
          f"{v['flat_wan_bytes']:,.0f} bytes ({v['hierarchical_wan_bytes'] / v['flat_wan_bytes']:.3f}x), "
          f"held-out loss {v['hierarchical_eval_loss']:.4f} vs {v['flat_eval_loss']:.4f}")


if __name__ == "__main__":
    sys.exit(main())
