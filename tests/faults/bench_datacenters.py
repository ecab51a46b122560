"""Elastic DiLoCo across emulated datacenters (issue 40's targets): what a lost worker and a lost
datacenter cost. Prints; asserts nothing. Root (network namespaces).

    sudo python -m tests.faults.bench_datacenters            # ~10-15 min on 2 busy cores

Protocol (fixed before the first run):
- 2 datacenters x 2 workers, each datacenter a network namespace behind a 100 Mbit/s shaped uplink
  (recipes.bench.netns, no added latency: its delay line routes datacenter to datacenter only, and the
  store sits on the hub), `python -m recipes.elastic_store` on the hub, `recipes.train` elastic workers
  (tiny GPT-Neo on the seeded Markov data, preset low: bf16 all-reduce, hierarchical across the
  datacenters; H=8; STEPS steps; seed 0; timeouts: heartbeat 2 s, join 30 s, collective 15 s).
- Three runs of the same seed and steps:
  1. fault-free: the reference held-out loss (rank 0's result.json, 8 batches) and the outer step's
     duration (median time between rank 0's consecutive outer steps);
  2. kill -9 of rank 3 (datacenter 1) once rank 0 passes step KILL_AT; it is started again at once,
     as the watcher replaces a lost pod. Measured: datacenter 0's longest pause (largest gap between a
     rank's consecutive training steps, by the workers' per-step events, after the kill) against one
     outer step's duration; steps lost = steps rank 0 trained twice (its step counter never goes back
     unless the job restarts) and the killed worker's inner steps since its last outer step (work lost);
  3. datacenter 1's uplink cut (its veth's hub end down) for CUT_S seconds once rank 0 passes step
     KILL_AT, then restored: datacenter 0's longest pause, its outer steps alone, the rejoin, the final
     held-out loss against run 1's (the issue asks within 2%). CUT_S is 60 s as the issue asks unless
     --cut-s says otherwise; the run is long enough that the cut ends before datacenter 0 finishes
     (a first attempt at 480 steps was stopped in its second run: its fault-free run showed 0.35 s
     outer steps, so datacenter 0 would have finished inside the 60 s cut; STEPS 3000, KILL_AT 200 since).
- Also printed: rank 0's WAN bytes (the leaders' exchange) and LAN bytes, and the uplinks' tx bytes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from recipes.bench.netns import Wan
from tests.faults.datacenters import Cluster
from tests.faults.faults import wait_for

STEPS, INNER, KILL_AT, CUT_S = 3000, 8, 200, 60.0


def step_times(cluster: Cluster, rank: int) -> list[tuple[int, float]]:
    return [(e["step"], e["at"]) for e in cluster.events(rank, "utilization")]


def longest_pause(cluster: Cluster, ranks: tuple[int, ...], after: float) -> float:
    gaps = [0.0]
    for rank in ranks:
        times = step_times(cluster, rank)
        gaps += [b[1] - a[1] for a, b in zip(times, times[1:]) if b[1] > after]
    return max(gaps)


def outer_step_s(cluster: Cluster, before: float | None = None) -> float:
    times = [e["at"] for e in cluster.events(0, "outer_step") if before is None or e["at"] < before]
    return statistics.median(b - a for a, b in zip(times, times[1:]))


def repeated_steps(cluster: Cluster, rank: int) -> int:
    steps = [s for s, _ in step_times(cluster, rank)]
    return len(steps) - len(set(steps))


def run(kind: str, folder: Path, cut_s: float) -> dict:
    with Wan(datacenters=2, mbit=100) as wan:
        cluster = Cluster(folder / kind, steps=STEPS, inner=INNER, wan=wan)
        out: dict = {"run": kind}
        try:
            cluster.start()
            wait_for(lambda: cluster.last_step(0) >= KILL_AT, 900, f"{kind}: step {KILL_AT}")
            at = time.time()
            tx = wan.tx_bytes_per_dc()
            if kind == "kill -9 rank 3":
                before = cluster.last_step(3)
                cluster.workers[3].kill()
                cluster.workers[3].wait()
                cluster.start_worker(3)
                out["killed_worker_unsynced_steps"] = before % INNER
            elif kind.startswith("datacenter 1 cut"):
                cluster.set_link(1, up=False)
                time.sleep(cut_s)  # the fault's duration itself, not a wait for a condition
                cluster.set_link(1, up=True)
            codes = [proc.wait(timeout=1800) for proc in cluster.workers.values()]
            out["exit_codes"] = codes
        finally:
            cluster.stop()
        solo = [e["step"] for e in cluster.events(0, "outer_step") if set(e.get("datacenters", {})) == {"dc0"}]
        result = cluster.result()
        out.update(eval_loss=result["eval_loss"], outer_step_s=outer_step_s(cluster, at),
                   dc0_longest_pause_s=longest_pause(cluster, (0, 1), at),
                   rank0_steps_repeated=repeated_steps(cluster, 0), dc0_solo_outer_steps=len(solo),
                   rejoined=[r for r in (2, 3) if cluster.events(r, "rejoined")],
                   wan_bytes_rank0=result["bytes_sent"], lan_bytes_rank0=result.get("lan_bytes", 0),
                   uplink_tx_after_fault=[b - a for a, b in zip(tx, wan.tx_bytes_per_dc())])
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cut-s", type=float, default=CUT_S)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="geotrain-dcbench-") as tmp:
        for kind in ("fault-free", "kill -9 rank 3", f"datacenter 1 cut {args.cut_s:.0f} s"):
            rows.append(run(kind, Path(tmp), args.cut_s))
            print(json.dumps(rows[-1]), flush=True)
    ref = rows[0]["eval_loss"]
    print(f"\n2 datacenters x 2 workers, 100 Mbit/s uplinks, tiny GPT-Neo, preset low (hierarchical bf16), "
          f"H={INNER}, {STEPS} steps, seed 0, fault at rank 0's step {KILL_AT}")
    print("run | outer step s | dc0 longest pause s | pause / outer step | rank-0 steps lost | "
          "dc0 solo outer steps | rejoined | held-out loss | vs fault-free | WAN B (rank 0) | LAN B (rank 0)")
    for r in rows:
        print(f"{r['run']} | {r['outer_step_s']:.2f} | {r['dc0_longest_pause_s']:.2f} | "
              f"{r['dc0_longest_pause_s'] / r['outer_step_s']:.2f} | {r['rank0_steps_repeated']} | "
              f"{r['dc0_solo_outer_steps']} | {r['rejoined']} | {r['eval_loss']:.4f} | "
              f"{100 * (r['eval_loss'] - ref) / ref:+.2f}% | {r['wan_bytes_rank0']:,} | {r['lan_bytes_rank0']:,}")


if __name__ == "__main__":
    main()
