"""Fixed app states shared by the Pilot tests, the snapshot tests and the screenshot
script: a temp GEOTRAIN_HOME with workspaces whose run directories hold the files of a
real recorded local run (tests/tui/fixtures/real_run, `python -m tests.tui.record_run`),
their ids, paths and times rewritten here to the fixed ones, and a frozen clock."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from core.backends.wandb_runs import assign_project
from core.backends.local.run_history import RunHistory, read_history
from core.domain.run_events import parse_event
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


REAL_RUN = Path(__file__).resolve().parent / "fixtures" / "real_run"
SHOWN_HOME = "/home/ada/.local/share/geotrain"  # a user's run dirs (the default data dir)
RUNNING_UPTO = 60  # the live workspace: the recorded run cut after this step


def recorded() -> dict:
    """Which id, run dir and clock the recorded run had (tests/tui/record_run.py)."""
    return json.loads((REAL_RUN / "recorded.json").read_text())


def _shift_times(row: dict, offset: float) -> dict:
    for key in ("at", "time"):
        if isinstance(row.get(key), (int, float)) and not isinstance(row.get(key), bool):
            row[key] = round(row[key] + offset, 3)
    return row


def real_text(name: str, workspace_id: str, started: float, home: str = SHOWN_HOME) -> str:
    """A recorded file as this workspace would have it: the recorded id and run dir become
    this workspace's (its run dir as a user sees it, or under `home` where geotrain checks
    the path), and every time moves by the same offset so the run starts at `started` on
    the frozen clock."""
    meta = recorded()
    text = (REAL_RUN / name).read_text()
    text = text.replace(meta["run_dir"], f"{home}/workspaces/{workspace_id}")
    text = text.replace(meta["home"], home).replace(meta["workspace_id"], workspace_id)
    offset = started - meta["started_at"]
    lines = []
    for line in text.splitlines():
        head, sep, body = line.partition("geotrain-event ") if "geotrain-event {" in line else ("", "", line)
        try:
            row = json.loads(body)
        except ValueError:
            lines.append(line)
            continue
        if isinstance(row, dict):
            line = head + sep + json.dumps(_shift_times(row, offset))
        lines.append(line)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def write_wandb_run(run_dir: Path, home: Path, workspace_id: str, started: float) -> None:
    """The recorded W&B run file, naming its offline run folder under the real home (which
    it creates, as wandb did): geotrain syncs only a folder that is the workspace's own."""
    text = real_text("out/wandb_run.json", workspace_id, started, str(home))
    Path(json.loads(text)["sync_dir"]).mkdir(parents=True, exist_ok=True)
    (run_dir / "out" / "wandb_run.json").write_text(text)


def metrics_rows(upto: int | None = None) -> list[dict]:
    """The recorded run's metrics rows (to `upto` steps)."""
    rows = [json.loads(line) for line in (REAL_RUN / "out" / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if upto is None or r["step"] <= upto]


def worker_lines(worker: int, upto: int | None = None) -> list[str]:
    """Worker `worker`'s recorded log lines, cut after its progress line for step `upto`."""
    lines = (REAL_RUN / "logs" / f"worker-{worker}.log").read_text().splitlines()
    if upto is None:
        return lines
    last = next(i for i, line in enumerate(lines) if f" step {upto}/" in line)
    return lines[:last + 1]


def completed_loss() -> float:
    """The recorded run's final held-out loss (what the local backend shows as its last loss)."""
    return round(json.loads((REAL_RUN / "out" / "result.json").read_text())["eval_loss"], 4)


def log_line_count(upto: int | None = None) -> int:
    """Lines in both workers' logs (what the log view shows), to `upto` steps."""
    return sum(len(worker_lines(w, upto)) for w in (0, 1))


def event_line_count(upto: int | None = None) -> int:
    """The `geotrain-event` lines among them (what `e` hides in the log view)."""
    return sum(parse_event(line) is not None for w in (0, 1) for line in worker_lines(w, upto))


def write_real_run(home: Path, workspace_id: str, started: float, upto: int | None = None) -> Path:
    """A run dir with the recorded run's files, the whole run or cut after step `upto` (then
    still running: no exit code, no result, the history up to that step's time)."""
    run_dir = home / "workspaces" / workspace_id
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "out").mkdir()
    (run_dir / "launch.json").write_text(json.dumps({"workspace_id": workspace_id}))
    for worker in (0, 1):
        text = real_text(f"logs/worker-{worker}.log", workspace_id, started).splitlines()
        (run_dir / "logs" / f"worker-{worker}.log").write_text(
            "\n".join(text[:len(worker_lines(worker, upto))]) + "\n")
    metrics = real_text("out/metrics.jsonl", workspace_id, started).splitlines()[:len(metrics_rows(upto))]
    (run_dir / "out" / "metrics.jsonl").write_text("".join(line + "\n" for line in metrics))
    history = [json.loads(line) for line in real_text("history.jsonl", workspace_id, started).splitlines()]
    cut = json.loads(metrics[-1])["time"] if upto is not None else float("inf")
    (run_dir / "history.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in history if r["at"] <= cut))
    (run_dir / "phase.json").write_text(real_text("phase.json", workspace_id, started))
    write_wandb_run(run_dir, home, workspace_id, started)
    if upto is None:
        for name in ("exit_code", "out/result.json"):
            (run_dir / name).write_text(real_text(name, workspace_id, started))
    return run_dir


def _insert(store: Store, workspace_id: str, ws_spec: WorkspaceSpec, status: str,
            created: float, run_dir: Path | None, last_loss: float | None) -> None:
    assign_project(ws_spec.config, workspace_id)  # as a deploy does: one W&B project each
    with store.write() as conn:
        conn.execute("INSERT INTO workspaces(id, cluster, spec, status, run_dir, last_loss,"
                     " created_at, updated_at) VALUES (?,?,?,?,?,?,?,?)",
                     (workspace_id, ws_spec.cluster, json.dumps(ws_spec.to_dict()), status,
                      str(run_dir) if run_dir else None, last_loss, created, created))


PREPARING_ID = "gpt-neo-7a8b9c"  # the recorded run replayed up to its data preparation
RENDEZVOUS_ID = "gpt-neo-3c2d1e"  # … up to its rendezvous


def printed_in_order(workspace_id: str, started: float) -> list[tuple[float, str, str]]:
    """Both workers' recorded lines as they were printed: (time, worker, line); a line with no
    time of its own (not an event) takes the time of its worker's line before it."""
    merged = []
    for worker in (0, 1):
        at = started
        for index, line in enumerate(real_text(f"logs/worker-{worker}.log", workspace_id, started).splitlines()):
            event = parse_event(line)
            at = event["at"] if event and isinstance(event.get("at"), (int, float)) else at
            merged.append((at, worker, index, line))
    return [(at, f"worker-{worker}", line) for at, worker, _, line in sorted(merged)]


def write_replayed_run(home: Path, workspace_id: str, started: float, until) -> Path:
    """A run dir as the supervisor leaves it part-way: the recorded lines fed, in the order they
    were printed, to the supervisor's own RunHistory (which writes phase.json and the history's
    state records) until `until(history)` holds; the times it stamps become the lines' times."""
    run_dir = home / "workspaces" / workspace_id
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "out").mkdir()
    (run_dir / "launch.json").write_text(json.dumps({"workspace_id": workspace_id}))
    history = RunHistory(run_dir, workers=2)
    history.starting()
    stamps = [started]
    for at, worker, line in printed_in_order(workspace_id, started):
        with open(run_dir / "logs" / f"{worker}.log", "a") as handle:
            handle.write(line + "\n")
        if "W&B offline run in" in line:  # the recipe writes its run file as it says so
            write_wandb_run(run_dir, home, workspace_id, started)
        history.worker_line(worker, line)
        stamps += [at] * (len(read_history(run_dir)) + 1 - len(stamps))
        if until(history):
            break
    rows = read_history(run_dir)
    (run_dir / "history.jsonl").write_text(
        "".join(json.dumps({**row, "at": round(stamp, 3)}) + "\n" for row, stamp in zip(rows, stamps[1:])))
    phase = json.loads((run_dir / "phase.json").read_text())
    (run_dir / "phase.json").write_text(json.dumps({**phase, "at": round(at, 3)}))
    return run_dir


def seed_starting(home: Path, store: Store) -> list[subprocess.Popen]:
    """Two more local workspaces, still starting: one PREPARING_DATA, one in RENDEZVOUS (from the
    recorded run's own lines); returns their stand-in supervisors, for the caller to stop."""
    procs = []
    for workspace_id, age, until in (
            (PREPARING_ID, 20, lambda h: h.state[0] == "PREPARING_DATA" and "worker-1" in h.phases),
            (RENDEZVOUS_ID, 22, lambda h: h.state[0] == "RENDEZVOUS")):
        run_dir = write_replayed_run(home, workspace_id, NOW - age, until)
        procs.append(start_stand_in_supervisor(run_dir))
        _insert(store, workspace_id, spec("local", "gpt-neo"), "PENDING", NOW - age, run_dir, None)
    return procs


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
    run = write_real_run(home, COMPLETED_ID, NOW - 7200)
    _insert(store, COMPLETED_ID, spec("local", "gpt-neo"), "COMPLETED", NOW - 7200, run,
            completed_loss())
    failed = home / "workspaces" / FAILED_ID
    (failed / "logs").mkdir(parents=True)
    (failed / "out").mkdir()
    (failed / "launch.json").write_text(json.dumps({"workspace_id": FAILED_ID}))
    (failed / "logs" / "launcher.log").write_text("ValueError: dataset 'ogbn-arxiv' not found\n")
    (failed / "exit_code").write_text("1")
    _insert(store, FAILED_ID, spec("local", "gcn", preset="high"), "FAILED", NOW - 3000, failed,
            None)
    _insert(store, REMOTE_ID, spec("eu-west", "resnet50", "resnet50", "ultra", 4, 5000),
            "COMPLETED", NOW - 86400 * 2, None, 1.8342)
    procs = []
    if running:
        live = write_real_run(home, RUNNING_ID, NOW - 95, upto=RUNNING_UPTO)
        procs.append(start_stand_in_supervisor(live))
        _insert(store, RUNNING_ID, spec("local", "gpt-neo"), "RUNNING", NOW - 95, live, None)
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


