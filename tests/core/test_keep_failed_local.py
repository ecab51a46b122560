"""recovery.keep_failed_pods on local (issue 43): each failed worker process's own output and how it
ended are kept under kept/ in the run directory, apart from its replacement's lines, and
`workspaces pods` lists them; without the setting nothing is kept. Real worker processes under the
supervisor's real WorkerGroup (fixed group) and WorkerPool (elastic), with a tiny worker program in
place of recipes.train."""

import json
import os
import sys

import pytest

from core.backends.local.kept_failures import KEPT_DIR, read_kept
from core.backends.local.run_history import RunHistory
from core.backends.local.worker_group import WorkerGroup
from core.backends.local.worker_pool import WorkerPool
from core.backends.local.worker_processes import list_processes
from core.domain.recovery import RecoverySettings
from core.errors import FieldError

# rank 1 fails on its first run (attempt/incarnation 0) and succeeds after; each run prints its own line
WORKER = ("import os, sys\n"
          "rank, run = os.environ['RANK'], os.environ['TORCHELASTIC_RESTART_COUNT']\n"
          "print(f'rank {rank} run {run} says hello', flush=True)\n"
          "sys.exit(3 if rank == '1' and run == '0' else 0)\n")


def launch(tmp_path, keep: bool, **more) -> dict:
    (tmp_path / "logs").mkdir(exist_ok=True)
    return {"workspace_id": "ws-keep", "workers": 2, "worker_argv": [sys.executable, "-c", WORKER],
            "keep_failed": keep, "max_recoveries": 1, "standby": False, **more}


def test_the_setting_is_checked_strictly():
    assert RecoverySettings.from_dict({"keep_failed_pods": True}).keep_failed_pods
    assert not RecoverySettings.from_dict({}).keep_failed_pods
    with pytest.raises(FieldError, match="recovery.keep_failed_pods: expected true or false"):
        RecoverySettings.from_dict({"keep_failed_pods": "yes"})


def test_a_failed_group_member_is_kept_with_only_its_own_output(tmp_path):
    run = launch(tmp_path, keep=True)
    history = RunHistory(tmp_path, 2)
    code, failure = WorkerGroup(tmp_path, run, dict(os.environ), history, [], attempt=0).run()
    assert code == 3 and failure == "worker-1 exited with code 3"
    assert WorkerGroup(tmp_path, run, dict(os.environ), history, [], attempt=1).run() == (0, "")
    kept = read_kept(tmp_path)
    assert [(k["name"], k["exit_code"], k["attempt"]) for k in kept] == [("worker-1.0", 3, 0)]
    folder = tmp_path / KEPT_DIR / "worker-1.0"
    assert (folder / "output.log").read_text() == "rank 1 run 0 says hello\n"  # not the replacement's line
    assert "rank 1 run 1 says hello" in (tmp_path / "logs" / "worker-1.log").read_text()
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    rows = list_processes(tmp_path, "ws-keep")
    assert [(r.name, r.state) for r in rows][-1] == ("worker-1.0", "FAILED (kept)")
    assert "exited with code 3" in dict(rows[-1].detail)["process"]
    assert dict(rows[-1].detail)["last output"] == "rank 1 run 0 says hello"


def test_an_elastic_pool_keeps_each_failed_process(tmp_path):
    run = launch(tmp_path, keep=True)
    assert WorkerPool(tmp_path, run, dict(os.environ), RunHistory(tmp_path, 2)).run() == 0
    kept = read_kept(tmp_path)
    assert [(k["name"], k["exit_code"]) for k in kept] == [("worker-1.0", 3)]
    assert (tmp_path / KEPT_DIR / "worker-1.0" / "output.log").read_text() == "rank 1 run 0 says hello\n"
    assert json.loads((tmp_path / KEPT_DIR / "worker-1.0" / "exit.json").read_text())["how"] == "exited with code 3"


def test_without_the_setting_nothing_is_kept(tmp_path):
    run = launch(tmp_path, keep=False)
    assert WorkerGroup(tmp_path, run, dict(os.environ), RunHistory(tmp_path, 2), [], attempt=0).run()[0] == 3
    assert not (tmp_path / KEPT_DIR).exists() and read_kept(tmp_path) == []


def test_a_link_planted_as_kept_is_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / KEPT_DIR).symlink_to(elsewhere)
    run = launch(run_dir, keep=True)
    assert WorkerGroup(run_dir, run, dict(os.environ), RunHistory(run_dir, 2), [], attempt=0).run()[0] == 3
    assert list(elsewhere.iterdir()) == [] and read_kept(run_dir) == []


def test_planted_kept_records_are_read_bounded_and_never_through_a_link(tmp_path):
    """kept/ is in the workers' reach: an exit.json that is a link (here to /dev/zero, endless), a
    FIFO (an open would wait for a writer) or a huge file is skipped, not read whole."""
    base = tmp_path / KEPT_DIR
    for name in ("worker-0.0", "worker-0.1", "worker-0.2", "worker-0.3"):
        (base / name).mkdir(parents=True)
    (base / "worker-0.0" / "exit.json").symlink_to("/dev/zero")
    os.mkfifo(base / "worker-0.1" / "exit.json")
    (base / "worker-0.2" / "exit.json").write_text(json.dumps({"at": 1.0, "exit_code": 1, "pad": "x" * (1 << 20)}))
    (base / "worker-0.3" / "exit.json").write_text(json.dumps({"at": 2.0, "exit_code": 2}))
    assert [(k["name"], k["exit_code"]) for k in read_kept(tmp_path)] == [("worker-0.3", 2)]
