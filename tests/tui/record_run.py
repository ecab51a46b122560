"""Record a real tiny `local` run for the app's fixed states (snapshots, README pictures).

    python -m tests.tui.record_run [OUT_DIR]     # default: tests/tui/fixtures/real_run/

Deploys the default workspace the way a user does (`geotrain workspaces deploy` with
GEOTRAIN_HOME in a temp dir: tiny gpt-neo, 2 workers, preset medium, 200 steps, W&B
offline), waits for it to end, and copies the files the local backend and the recipe
wrote — worker logs (with their `geotrain-event {json}` lines), history.jsonl, phase.json,
exit_code, out/metrics.jsonl, out/result.json, out/wandb_run.json — unchanged. recorded.json
says which workspace id, run dir and clock the run had, so tests/tui/states.py can rewrite
them deterministically (paths, ids, times relative to the frozen clock) when it seeds.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = Path(__file__).resolve().parent / "fixtures" / "real_run"
DEPLOY = ["workspaces", "deploy", "distributed-training", "--cluster", "local", "--model",
          "gpt-neo", "--size", "tiny", "--gradient-compression", "medium", "--workers", "2",
          "--steps", "200", "--yes", "--json"]
FILES = ["logs/worker-0.log", "logs/worker-1.log", "history.jsonl", "phase.json", "exit_code",
         "out/metrics.jsonl", "out/result.json", "out/wandb_run.json"]


def _cli(home: Path, *args: str) -> str:
    env = dict(os.environ, GEOTRAIN_HOME=str(home), PYTHONPATH=str(ROOT))
    env.pop("WANDB_API_KEY", None)  # offline: nothing leaves the machine
    out = subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"geotrain {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def record(out_dir: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        started = time.time()
        ws = json.loads(_cli(home, *DEPLOY))
        run_dir = Path(ws["run_dir"])
        while not (run_dir / "exit_code").exists():
            if time.time() - started > 600:
                raise SystemExit("the recorded run did not end within 10 minutes")
            time.sleep(1)
        time.sleep(1)  # the supervisor's last writes
        listed = json.loads(_cli(home, "workspaces", "list", "--json"))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        for name in FILES:
            target = out_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run_dir / name, target)
        _cli(home, "workspaces", "delete", ws["id"], "--yes")  # as a user would; nothing left running
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    meta = {"workspace_id": ws["id"], "run_dir": str(run_dir), "home": str(home),
            "started_at": started, "seconds": round(time.time() - started, 1),
            "status": next(w["status"] for w in listed if w["id"] == ws["id"]),
            "command": "geotrain " + " ".join(DEPLOY),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit}
    (out_dir / "recorded.json").write_text(json.dumps(meta, indent=1) + "\n")
    (out_dir / "README.md").write_text(
        "# A real run, recorded\n\n"
        f"Produced by `python -m tests.tui.record_run` on {meta['date']} at commit {commit}: "
        f"`{meta['command']}` with GEOTRAIN_HOME in a temp dir, on 2 CPU cores "
        f"({meta['seconds']} s, ended {meta['status']}). The files are copied unchanged from "
        "the run dir; `recorded.json` names the run's id, run dir and start time, which "
        "tests/tui/states.py rewrites (id, paths, times relative to the frozen clock) when it "
        "seeds the app's fixed states. Re-record with the same command.\n")
    return meta


def main(argv: list[str]) -> int:
    meta = record(Path(argv[0]) if argv else DEFAULT_OUT)
    print(f"recorded {meta['workspace_id']} ({meta['status']}) in {meta['seconds']} s")
    return 0 if meta["status"] == "COMPLETED" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
