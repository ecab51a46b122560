"""Time from a worker's death to training again, and steps lost: DDP (the torchrun group
restarts from the newest checkpoint) vs elastic DiLoCo (the others go on; the killed
worker rejoins at an outer step), with and without a warm spare. Prints; asserts nothing.

    python -m tests.faults.bench_recovery            # ~5-10 min on 2 busy cores
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

from core.workspaces import WorkspaceService
from tests.faults.faults import deploy, last_step, torchrun_workers, wait_done, wait_for, worker_pids

WORKERS, STEPS, INNER, EVERY, KILL_AT = 3, 200, 8, 8, 28


def _rank0_times(run_dir: Path) -> list[tuple[int, float]]:
    rows = []
    for line in (run_dir / "out" / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "time" in row and "eval_loss" not in row:
            rows.append((row["step"], row["time"]))
    return rows


def _kill_rank1(ws, run_dir: Path, elastic: bool) -> None:
    if elastic:
        os.kill(worker_pids(run_dir)[1], signal.SIGKILL)
    else:
        proc = next(p for p in torchrun_workers(ws.id) if p.environ().get("RANK") == "1")
        os.kill(proc.pid, signal.SIGKILL)


def measure(service: WorkspaceService, name: str, preset: str, standby: bool = True) -> dict:
    elastic = preset != "none"
    ws = deploy(service, preset=preset, workers=WORKERS, steps=STEPS, inner=INNER, every=EVERY,
                recovery={"standby": standby})
    run_dir = Path(ws.run_dir)
    wait_for(lambda: last_step(run_dir, 0) >= KILL_AT, 600, f"{name}: step {KILL_AT}")
    before = last_step(run_dir, 1)
    killed_at = time.time()
    _kill_rank1(ws, run_dir, elastic)
    back_or_done = lambda: ([e for e in service.events(ws.id) if e["kind"] == "recovered"  # noqa: E731
                             and e["worker"] == "worker-1"]
                            or service.status(ws.id).status in ("COMPLETED", "FAILED"))
    wait_for(back_or_done, 900, f"{name}: worker-1 back")
    wait_done(service, ws.id, 900)
    back = next((e for e in service.events(ws.id) if e["kind"] == "recovered" and e["worker"] == "worker-1"),
                {"steps_lost": 0})  # nan below: the run ended before worker-1 was back
    times = _rank0_times(run_dir)
    gaps = [b[1] - a[1] for a, b in zip(times, times[1:])]
    # The job trains again when rank 0 logs its first step after the longest pause that
    # ended after the kill (DDP: the group restart; elastic: the quorum's wait for the dead one).
    pauses = [(b[1] - a[1], b[1]) for a, b in zip(times, times[1:]) if b[1] > killed_at]
    stalled, resumed_at = max(pauses, default=(0.0, killed_at))
    result = {"run": name, "normal_step_s": statistics.median(gaps),
              "job_training_again_s": resumed_at - killed_at,
              "longest_stall_s": stalled,
              "worker1_back_s": back["at"] - killed_at if "at" in back else float("nan"),
              "job_steps_lost": back["steps_lost"],
              "worker1_unsynced_steps": before - (before // INNER) * INNER if elastic else 0}
    service.delete(ws.id)
    return result


def main() -> None:
    with tempfile.TemporaryDirectory() as home:
        os.environ["GEOTRAIN_HOME"] = home
        service = WorkspaceService()
        rows = []
        for args in (("DDP (none), group restart", "none"),
                     ("elastic DiLoCo (low), warm spare", "low"),
                     ("elastic DiLoCo (low), cold start", "low", False)):
            rows.append(measure(service, *args))
            print(rows[-1], flush=True)
    print(f"\n{WORKERS} workers, tiny GPT-Neo, kill -9 of worker-1 at step ~{KILL_AT}, "
          f"checkpoint every {EVERY}, H={INNER}, os.cpu_count()={os.cpu_count()}")
    head = ("run", "step s", "job trains again s", "longest stall s", "worker-1 back s",
            "job steps lost", "worker-1 unsynced steps")
    print(" | ".join(head))
    for r in rows:
        print(f"{r['run']} | {r['normal_step_s']:.2f} | {r['job_training_again_s']:.1f} | "
              f"{r['longest_stall_s']:.1f} | {r['worker1_back_s']:.1f} | {r['job_steps_lost']} | "
              f"{r['worker1_unsynced_steps']}")


if __name__ == "__main__":
    main()
