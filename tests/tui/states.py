"""Fixed app states shared by the Pilot tests, the snapshot tests and the screenshot
script: a temp GEOTRAIN_HOME with workspaces, run directories, logs and metrics that
look like real ones (same files the local backend writes), and a frozen clock."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

from core.nodes import facts
from core.state.cluster_records import save_cluster
from core.nodes.status import status_for
from core.domain.records import Cluster, Node, WorkspaceSpec
from core.state.node_records import add_nodes
from core.state.store import Store
from core.workspaces import WorkspaceService

NOW = 1_790_000_000.0  # the frozen clock of every fixed state
COMPLETED_ID = "gpt-neo-a1b2c3"
RUNNING_ID = "gpt-neo-d4e5f6"
FAILED_ID = "gcn-0f0f0f"
REMOTE_ID = "resnet50-0a0b0c"
FIXTURES = Path(__file__).resolve().parents[1] / "nodes" / "fixtures"


def spec(cluster: str, model: str, size: str = "tiny", preset: str = "medium",
         workers: int = 2, steps: int = 200) -> WorkspaceSpec:
    config = {"model": model, "size": size, "gradient_compression": preset, "steps": steps,
              "optim": {"lr": 0.0003, "warmup_steps": 10}, "data": {"dataset": "synthetic"}}
    return WorkspaceSpec(cluster=cluster, model=model, size=size, preset=preset,
                         workers=workers, steps=steps, config=config)


def metrics_rows(steps: int) -> list[dict]:
    return [{"step": s, "loss": round(2.0 + 8.0 * math.exp(-s / 30) + 0.1 * math.sin(s), 4),
             "bytes_sent": 4096 * s * 12} for s in range(0, steps + 1, 2)]


def worker_lines(worker: int, count: int) -> list[str]:
    lines = [f"[rank {worker}] gloo process group ready (world size 2)",
             f"[rank {worker}] model gpt-neo tiny: 1.2M parameters, preset medium (fp8, H=8)"]
    for row in metrics_rows(count * 2)[:count]:
        lines.append(f"[rank {worker}] step {row['step']:>4}  loss {row['loss']:.4f}"
                     f"  sent {row['bytes_sent'] // 1000} KB  lr 3.0e-04")
    return lines


def _insert(store: Store, workspace_id: str, ws_spec: WorkspaceSpec, status: str,
            created: float, run_dir: Path | None, last_loss: float | None) -> None:
    with store.write() as conn:
        conn.execute("INSERT INTO workspaces(id, cluster, spec, status, run_dir, last_loss,"
                     " created_at, updated_at) VALUES (?,?,?,?,?,?,?,?)",
                     (workspace_id, ws_spec.cluster, json.dumps(ws_spec.to_dict()), status,
                      str(run_dir) if run_dir else None, last_loss, created, created))


def write_run_dir(home: Path, workspace_id: str, lines_per_worker: int, exit_code: int | None,
                  metrics: list[dict]) -> Path:
    run_dir = home / "workspaces" / workspace_id
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "out").mkdir()
    (run_dir / "launch.json").write_text(json.dumps({"workspace_id": workspace_id}))
    for worker in (0, 1):
        (run_dir / "logs" / f"worker-{worker}.log").write_text(
            "\n".join(worker_lines(worker, lines_per_worker)) + "\n")
    (run_dir / "out" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    if exit_code is not None:
        (run_dir / "exit_code").write_text(str(exit_code))
    return run_dir


def start_stand_in_supervisor(run_dir: Path) -> subprocess.Popen:
    """A live process whose command line names the run dir, as the real supervisor's
    does: the local backend then reports the workspace RUNNING."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", str(run_dir)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    (run_dir / "supervisor.pid").write_text(str(proc.pid))
    return proc


def seed(home: Path, running: bool = True) -> tuple[WorkspaceService, list[subprocess.Popen]]:
    """Fill `home` (already GEOTRAIN_HOME) with the fixed state; returns the service and
    the stand-in processes the caller must stop."""
    store = Store()
    service = WorkspaceService(store)
    save_cluster(store, Cluster(name="eu-west", kind="geotrain"), create=True)
    done = metrics_rows(200)
    run = write_run_dir(home, COMPLETED_ID, 30, 0, done)
    _insert(store, COMPLETED_ID, spec("local", "gpt-neo"), "COMPLETED", NOW - 7200, run,
            done[-1]["loss"])
    failed = write_run_dir(home, FAILED_ID, 3, 1, [])
    (failed / "logs" / "launcher.log").write_text("ValueError: dataset 'ogbn-arxiv' not found\n")
    _insert(store, FAILED_ID, spec("local", "gcn", preset="high"), "FAILED", NOW - 3000, failed,
            None)
    _insert(store, REMOTE_ID, spec("eu-west", "resnet50", "resnet50", "ultra", 4, 5000),
            "COMPLETED", NOW - 86400 * 2, None, 1.8342)
    procs = []
    if running:
        live = write_run_dir(home, RUNNING_ID, 12, None, metrics_rows(60))
        procs.append(start_stand_in_supervisor(live))
        _insert(store, RUNNING_ID, spec("local", "gpt-neo", steps=1000), "RUNNING", NOW - 95,
                live, None)
    add_nodes(store, recorded_nodes())
    return service, procs


def recorded_nodes() -> list[Node]:
    """Two nodes whose facts come from real servers' recorded fact-script outputs."""
    nodes = []
    for name, host, dc, fixture in (("fra-1", "203.0.113.11", "frankfurt",
                                     "host_ubuntu2204_docker_8gpu.txt"),
                                    ("ams-2", "198.51.100.12", "amsterdam",
                                     "host_debian12_testhost.txt")):
        found = facts.parse_all((FIXTURES / fixture).read_text())
        found["gathered_at"] = NOW
        status, blockers = status_for(found, None)
        nodes.append(Node(name=name, host=host, username="root", datacenter=dc, status=status,
                          blockers=blockers, facts=found))
    return nodes


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait(timeout=5)


def app_options() -> dict:
    """Options for a deterministic app: frozen clock, no background polling."""
    return {"clock": lambda: NOW, "poll_seconds": 0}


