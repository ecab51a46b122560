"""Processes geotrain starts or stops on hostile or unlucky ground: checking a config starts
none; `workspaces delete` kills only its own supervisor."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psutil
import pytest

from core.backends.local.backend import LocalBackend
from core.state import paths

ROOT = Path(__file__).resolve().parents[2]

def _wait_for(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_checking_a_config_starts_no_process_that_a_killed_parent_could_leave_behind():
    """The checker once ran as a subprocess with a temp file; it is in-process now."""
    from core.domain.recipe_catalog import default_config
    from core.schema.training_config import config_errors

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    assert config_errors({**default_config("gpt-neo", "tiny"), "steps": 0})
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_delete_does_not_kill_an_unrelated_process_named_in_supervisor_pid(geotrain_home):
    workspace_id = "gpt-neo-abcdef"
    run_dir = paths.home() / "workspaces" / workspace_id
    (run_dir / "logs").mkdir(parents=True)
    bystander = subprocess.Popen(["sleep", "300"])  # what the PID now belongs to (reused, or the file edited)
    try:
        (run_dir / "supervisor.pid").write_text(str(bystander.pid))
        backend = LocalBackend()
        assert backend.status(workspace_id).status == "FAILED"  # not taken for our supervisor either
        backend.delete(workspace_id)
        assert bystander.poll() is None, "an unrelated process was killed"
        assert not run_dir.exists()
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("text", ["abc", "9" * 5000, "\u0661", ""])
def test_an_exit_code_file_that_is_not_a_number_reads_as_a_failure(geotrain_home, text):
    run_dir = paths.home() / "workspaces" / "gpt-neo-abcdef"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "exit_code").write_text(text)  # the run dir is the workers' cwd: they could write it
    state = LocalBackend().status("gpt-neo-abcdef")
    assert (state.status, state.exit_code) == ("FAILED", 70)
