"""Benchmark (prints, asserts nothing): how soon the app and the commands answer, each side by
side with the least a Textual app or a click program can do.

    python -m tests.bench_startup [--runs N]

Every case runs in a fresh interpreter, N times (default 5), interleaved with its baseline so a
busy machine slows both alike; the best run of each counts. The targets are on wall-clock time;
the CPU time each process used (best of N too) is printed beside it because it moves far less
when other work shares the machine. Targets from issue 45:
- the app's first frame <= 1.5x a minimal Textual app with a header, a table and a footer
  (both run headless and print when their first frame has been painted);
- `workspaces list --json`, `workspaces show ID`, `--help` and a <Tab> completion <= 2x a
  bare click program that opens the SQLite store and does the same.
GEOTRAIN_HOME is a temporary directory holding one completed local workspace. The processes
keep their compiled bytecode (in a temporary PYTHONPYCACHEPREFIX, after one untimed warm-up
run), as an installed geotrain has its .pyc files: with PYTHONDONTWRITEBYTECODE set, as on
the development machines, every start would compile each geotrain module again while the
baseline's click and textual come precompiled. `--cold` measures that way instead.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKSPACE_ID = "gpt-neo-5a7b9c"

# Both apps are timed the same way: from spawn (the parent's clock, passed in) to the second
# refresh after start, i.e. when the first frame has been painted.
FRAME_HOOK = """
def painted():
    print(f"FRAME {time.time() - t0:.3f}", flush=True)
    app.exit()
app.call_after_refresh(lambda: app.call_after_refresh(painted))
app.run(headless=True, size=(120, 40))
"""

GEOTRAIN_APP = """
import sys, time
t0 = float(sys.argv[1])
from tui.app import make_app
app = make_app()
""" + FRAME_HOOK

MINIMAL_APP = """
import sys, time
t0 = float(sys.argv[1])
from textual.app import App
from textual.widgets import DataTable, Footer, Header

class Minimal(App):
    def compose(self):
        yield Header()
        yield DataTable()
        yield Footer()

    def on_mount(self):
        table = self.query_one(DataTable)
        table.add_columns("id", "cluster", "status")
        table.add_row("gpt-neo-5a7b9c", "local", "COMPLETED")

app = Minimal()
""" + FRAME_HOOK

GEOTRAIN_CLI = "import sys; from tui.entry import main; sys.exit(main())"  # what the console script runs

# The least a click program can do for the same commands: open the store read-only and answer.
BARE_CLI = """
import json, os, sqlite3, sys
import click

def rows(query, *args):
    path = os.path.join(os.environ["GEOTRAIN_HOME"], "state.sqlite3")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    return [dict(r) for r in conn.execute(query, args)]

def ids(ctx, param, incomplete):
    return [r["id"] for r in rows("SELECT id FROM workspaces") if r["id"].startswith(incomplete)]

@click.group()
def cli():
    "Train models across datacenters."

@cli.group()
def workspaces():
    "deploy and manage training workspaces"

@workspaces.command("list")
@click.option("--json", "as_json", is_flag=True)
def list_(as_json):
    "list workspaces on all clusters"
    print(json.dumps(rows("SELECT * FROM workspaces"), indent=1))

@workspaces.command()
@click.argument("id", shell_complete=ids)
def show(id):
    "status, workers, spec and history of a workspace"
    row = rows("SELECT * FROM workspaces WHERE id=?", id)[0]
    print(row["id"], row["status"])
    print(json.dumps(json.loads(row["spec"]), indent=1))

cli(prog_name="geotrain", complete_var="_GEOTRAIN_COMPLETE")
"""

COMPLETION_ENV = {"_GEOTRAIN_COMPLETE": "bash_complete", "COMP_WORDS": "geotrain workspaces show gpt",
                  "COMP_CWORD": "3"}
CASES = [  # name, argv, extra environment
    ("workspaces list --json", ["workspaces", "list", "--json"], {}),
    ("workspaces show ID", ["workspaces", "show", WORKSPACE_ID], {}),
    ("--help", ["--help"], {}),
    ("completion (<Tab> after show)", [], COMPLETION_ENV),
]


def make_home() -> Path:
    """A data directory with one completed local workspace (its run dir included), made in a
    child process so this one imports nothing of geotrain."""
    home = Path(tempfile.mkdtemp(prefix="geotrain-bench-startup-"))
    code = f"""
import json, time
from core.workspaces import DeployRequest, WorkspaceService
service = WorkspaceService()
spec = service.build_spec(DeployRequest())
run_dir = service.backend("local").run_dir({WORKSPACE_ID!r})
(run_dir / "logs").mkdir(parents=True)
(run_dir / "out").mkdir()
for worker in (0, 1):
    (run_dir / "logs" / f"worker-{{worker}}.log").write_text("step 200 loss 2.31\\n")
(run_dir / "out" / "metrics.jsonl").write_text(json.dumps({{"step": 200, "loss": 2.31, "time": 1.0}}) + "\\n")
(run_dir / "exit_code").write_text("0")
now = time.time()
with service.store.write() as conn:
    conn.execute("INSERT INTO workspaces(id, cluster, spec, status, run_dir, last_loss, created_at, updated_at)"
                 " VALUES (?,?,?,?,?,?,?,?)", ({WORKSPACE_ID!r}, "local", json.dumps(spec.to_dict()),
                 "COMPLETED", str(run_dir), 2.31, now, now))
service.record_event({WORKSPACE_ID!r}, "deployed", {{"workers": 2}})
"""
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, GEOTRAIN_HOME=str(home)),
                   check=True)
    return home


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(code: str, argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(seconds from spawn to exit, or to the FRAME line an app prints; CPU seconds it used)."""
    started, cpu = time.time(), _cpu_of_children()
    out = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    elapsed, cpu = time.time() - started, _cpu_of_children() - cpu
    if out.returncode != 0 or not out.stdout.strip():
        sys.exit(f"{argv or code[:40]!r} failed ({out.returncode}):\n{out.stdout}{out.stderr}")
    frame = next((ln for ln in out.stdout.splitlines() if ln.startswith("FRAME ")), None)
    return (float(frame.split()[1]) if frame else elapsed), cpu


def measure(runs: int, home: Path, cold: bool = False) -> list[tuple[str, list[float], list[float], float]]:
    """(case, geotrain's best [wall, cpu], the baseline's best [wall, cpu], target ratio),
    every pair interleaved."""
    env = dict(os.environ, GEOTRAIN_HOME=str(home))
    env.pop("_GEOTRAIN_COMPLETE", None)
    if not cold:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(home / "pycache")
    pairs = [("app: first frame (vs minimal Textual app)", GEOTRAIN_APP, MINIMAL_APP, [], 1.5,
              lambda: [repr(time.time())], {})]
    pairs += [(name, GEOTRAIN_CLI, BARE_CLI, argv, 2.0, None, extra) for name, argv, extra in CASES]
    best = {name: [[float("inf")] * 2, [float("inf")] * 2] for name, *_ in pairs}
    for name, ours, theirs, argv, _, stamp, extra in pairs:  # warm-up: bytecode written, files cached
        for code in (ours, theirs):
            timed(code, stamp() if stamp else argv, {**env, **extra})
    for _ in range(runs):
        for name, ours, theirs, argv, _, stamp, extra in pairs:
            for side, code in enumerate((ours, theirs)):
                args = stamp() if stamp else argv
                wall, cpu = timed(code, args, {**env, **extra})
                best[name][side] = [min(best[name][side][0], wall), min(best[name][side][1], cpu)]
    return [(name, *best[name], target) for name, _, _, _, target, _, _ in pairs]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cold", action="store_true", help="no bytecode cache: compile at every start")
    args = parser.parse_args()
    home = make_home()
    try:
        report(home, args)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return 0


def report(home: Path, args: argparse.Namespace) -> None:
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
          f"best of {args.runs} interleaved runs, {'no bytecode cache' if args.cold else 'bytecode cached'}")
    print(f"{'case':44} {'geotrain':>9} {'baseline':>9} {'ratio':>6} {'target':>7}        {'cpu ratio':>9}")
    for name, ours, theirs, target in measure(args.runs, home, args.cold):
        ratio = ours[0] / theirs[0]
        print(f"{name:44} {ours[0]:8.3f}s {theirs[0]:8.3f}s {ratio:5.2f}x {'<=':>3}{target:.1f}x "
              f"{'ok' if ratio <= target else 'MISSED':6} {ours[1] / theirs[1]:8.2f}x", flush=True)


if __name__ == "__main__":
    sys.exit(main())
