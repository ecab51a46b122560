"""`geotrain workspaces pods ID [--describe]` and `workspaces shell ID --rank N` on local (issue 43),
run as the real CLI against the app tests' seeded state and a live stand-in worker process: each
worker's pid, state, restarts and last event; a shell with the worker's environment and directory,
its token in the environment only; a rank it does not have is one line, nothing run."""

import json
import os
import subprocess
import sys
from pathlib import Path

from core.state.secret_store import SecretStore
from tests.tui import states
from tests.tui.test_worker_processes import TOKEN, prepare

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, **env):
    return subprocess.run([sys.executable, "-m", "core.cli", "workspaces", *args], cwd=ROOT,
                          env=dict(os.environ, **env), capture_output=True, text=True, timeout=120)


def test_pods_and_shell_from_the_command_line(geotrain_home, tmp_path):
    _, procs = states.seed(geotrain_home)
    run_dir, worker, shell, said = prepare(geotrain_home, tmp_path)
    try:
        listed = cli("pods", states.RUNNING_ID, "--describe")
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.splitlines()
        assert lines[0].split() == ["WORKER", "PID", "STATE", "RESTARTS", "LAST", "EVENT"]
        assert lines[1].split()[:4] == ["worker-0", "-", "RUNNING", "0"]
        assert lines[2].split()[:4] == ["worker-1", str(worker.pid), "RUNNING", "1"] and "recovery" in lines[2]
        assert "(set; hidden)" in listed.stdout and TOKEN not in listed.stdout
        as_json = json.loads(cli("pods", states.RUNNING_ID, "--json").stdout)
        assert [(r["name"], r["pid"], r["restarts"]) for r in as_json] == [("worker-0", None, 0),
                                                                            ("worker-1", worker.pid, 1)]
        opened = cli("shell", states.RUNNING_ID, "--rank", "1", SHELL=str(shell))
        assert opened.returncode == 0, opened.stderr
        assert f"worker-1 of {states.RUNNING_ID} (pid {worker.pid})" in opened.stderr
        got = json.loads(said.read_text())
        assert got["cwd"] == str(run_dir) and got["env"]["RANK"] == "1" and got["env"]["WANDB_API_KEY"] == TOKEN
        assert TOKEN not in " ".join(got["argv"])
        said.unlink()
        ended = cli("shell", states.RUNNING_ID, "--rank", "0", SHELL=str(shell))  # not running: as launched
        got = json.loads(said.read_text())
        assert "not running" in ended.stderr and got["env"]["RANK"] == "0" and got["env"]["WANDB_API_KEY"] == TOKEN
        said.unlink()
        other = SecretStore().put("ws-other/hf", "hf_other_workspace_token")  # another workspace's token
        launch = json.loads((run_dir / "launch.json").read_text())
        launch["secret_refs"]["HF_TOKEN"] = other  # planted by a worker: the run dir is in its reach
        launch["env"].update({"LD_PRELOAD": "/tmp/planted.so", "BASH_ENV": "/tmp/planted.sh"})
        launch["secrets_path"] = str(tmp_path / "elsewhere.json")
        (run_dir / "launch.json").write_text(json.dumps(launch))
        cli("shell", states.RUNNING_ID, "--rank", "0", SHELL=str(shell))
        got = json.loads(said.read_text())["env"]
        assert got["WANDB_API_KEY"] == TOKEN and "HF_TOKEN" not in got  # its own token, not the planted one
        assert got.get("LD_PRELOAD") != "/tmp/planted.so" and got.get("BASH_ENV") != "/tmp/planted.sh"
        said.unlink()
        wrong = cli("shell", states.RUNNING_ID, "--rank", "7", SHELL=str(shell))
        assert wrong.returncode != 0 and len(wrong.stderr.strip().splitlines()) == 1
        assert "--rank 7 is not a worker" in wrong.stderr and not said.exists()
    finally:
        worker.kill()
        worker.wait()
        states.stop(procs)
