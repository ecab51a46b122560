"""What starting geotrain imports (issue 45): `--help`, a <Tab>, `workspaces list` and `show`,
and the app's first frame load none of the heavy modules they do not use. Each is run in a
fresh interpreter, as a user starts it, so an import added at the top of a module on the
start path fails here instead of slowing every start again.

The figures are in tests/bench_startup.py; this guards the import graph they depend on.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKSPACE_ID = "gpt-neo-5a7b9c"

# Never on any start path: the training stack, the clients of clusters, nodes and W&B, the
# typed schemas (pydantic) and the config editor with its YAML highlighting.
NEVER = {"torch", "transformers", "datasets", "kubernetes", "paramiko", "wandb", "tree_sitter",
         "tree_sitter_yaml", "pydantic", "pydantic_core", "recipes.schema.models",
         "core.domain.recovery", "core.domain.spec_schema", "core.nodes.ssh",
         "tui.screens.config_editor"}
# Not for the commands that print no YAML and read no run directory.
NOT_FOR_LISTING = {"yaml", "psutil", "core.backends.local.backend", "core.requirements.check"}

CLI = "import sys; from tui.entry import main; main(sys.argv[1:])"
APP = """
from tui.app import make_app
app = make_app()
app.call_after_refresh(lambda: app.call_after_refresh(app.exit))  # after the first frame
app.run(headless=True, size=(120, 40))
"""
REPORT = """
import sys
print("LOADED " + " ".join(sorted(sys.modules)))
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """A data directory with one completed local workspace, written with sqlite3 alone."""
    home = tmp_path_factory.mktemp("geotrain-home")
    env = dict(os.environ, GEOTRAIN_HOME=str(home))
    subprocess.run([sys.executable, "-c", "from core.state.store import Store; Store()"], cwd=ROOT,
                   env=env, check=True)
    run_dir = home / "workspaces" / WORKSPACE_ID
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "out").mkdir()
    (run_dir / "logs" / "worker-0.log").write_text("step 5 loss 2.3\n")
    (run_dir / "out" / "metrics.jsonl").write_text(json.dumps({"step": 5, "loss": 2.3, "time": 1.0}) + "\n")
    (run_dir / "exit_code").write_text("0")
    spec = {"cluster": "local", "model": "gpt-neo", "size": "tiny", "preset": "medium", "workers": 1,
            "steps": 5, "template": "distributed-training", "config": {}, "tokens": {}, "image": None,
            "recovery": {}}
    with sqlite3.connect(home / "state.sqlite3") as conn:
        conn.execute("INSERT INTO workspaces(id, cluster, spec, status, run_dir, last_loss, created_at,"
                     " updated_at) VALUES (?,?,?,?,?,?,?,?)", (WORKSPACE_ID, "local", json.dumps(spec),
                                                              "COMPLETED", str(run_dir), 2.3, time.time(),
                                                              time.time()))
    return home


def loaded(home: Path, code: str, *argv: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules a fresh interpreter holds after running `code` (its exit ignored)."""
    probe = f"try:\n    exec({code!r})\nexcept SystemExit:\n    pass\n{REPORT}"
    out = subprocess.run([sys.executable, "-c", probe, *argv], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "GEOTRAIN_HOME": str(home), **(env or {})}, timeout=120)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("LOADED ")), None)
    assert out.returncode == 0 and line, out.stdout[-2000:] + out.stderr[-2000:]
    return set(line.split()[1:])


def offending(modules: set[str], forbidden: set[str]) -> list[str]:
    return sorted(m for m in modules if m in forbidden or m.split(".")[0] in forbidden)


COMMANDS = {
    "--help": (["--help"], {}),
    "workspaces list --json": (["workspaces", "list", "--json"], {}),
    "completion": ([], {"_GEOTRAIN_COMPLETE": "bash_complete", "COMP_WORDS": "geotrain workspaces show gpt",
                        "COMP_CWORD": "3"}),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_listing_commands_load_no_schema_yaml_or_backend(home, command):
    argv, env = COMMANDS[command]
    assert offending(loaded(home, CLI, *argv, env=env), NEVER | NOT_FOR_LISTING) == []


def test_show_reads_the_run_without_schema_or_process_tools(home):
    modules = loaded(home, CLI, "workspaces", "show", WORKSPACE_ID)
    assert offending(modules, NEVER | {"psutil", "core.backends.local.supervisor", "core.backends.export"}) == []
    assert "core.backends.local.backend" in modules  # the probe did read the run


def test_the_app_first_frame_loads_only_the_first_screen(home):
    modules = loaded(home, APP)
    other_screens = {m for m in modules if m.startswith("tui.screens.")} - {
        "tui.screens", "tui.screens.workspaces", "tui.screens.table_screen", "tui.screens.base"}
    assert offending(modules, NEVER | {"core.nodes.pool", "core.requirements.check"}) == []
    assert sorted(other_screens) == []
