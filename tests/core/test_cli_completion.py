"""Shell completion: commands from click, workspace ids and node/cluster names from the store.

Runs the real `geotrain` entry point the way bash's completion function does (click's
protocol: _GEOTRAIN_COMPLETE=bash_complete with COMP_WORDS/COMP_CWORD set; see
https://click.palletsprojects.com/en/stable/shell-completion/).
"""

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from core.domain.records import Cluster, Node
from core.state.cluster_records import save_cluster
from core.state.node_records import add_nodes
from core.state.store import Store

ROOT = Path(__file__).resolve().parents[2]


def _complete(home: Path, words: str) -> list[str]:
    """What bash would offer after `words` (a trailing space completes a new word)."""
    env = {**os.environ, "GEOTRAIN_HOME": str(home), "_GEOTRAIN_COMPLETE": "bash_complete",
           "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "tui.entry"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [line.split(",", 1)[1] for line in proc.stdout.splitlines() if line]


def _fill(home: Path) -> None:
    store = Store()
    add_nodes(store, [Node(name="gpu-a", host="10.0.0.1", username="u"),
                      Node(name="gpu-b", host="10.0.0.2", username="u")])
    save_cluster(store, Cluster(name="east", kind="kubernetes"), create=True)
    with sqlite3.connect(home / "state.sqlite3") as conn:
        conn.execute("INSERT INTO workspaces(id, cluster, spec, status, created_at, updated_at)"
                     " VALUES ('gpt-neo-abc123', 'local', '{}', 'RUNNING', 0, 0)")


def test_commands_and_names_complete_from_the_store(geotrain_home):
    _fill(geotrain_home)
    assert _complete(geotrain_home, "geotrain work") == ["workspaces"]
    assert {"deploy", "list", "show", "logs", "delete"} <= set(_complete(geotrain_home, "geotrain workspaces "))
    assert _complete(geotrain_home, "geotrain workspaces show ") == ["gpt-neo-abc123"]
    assert _complete(geotrain_home, "geotrain nodes show gpu-") == ["gpu-a", "gpu-b"]
    assert _complete(geotrain_home, "geotrain nodes refresh gpu-a ") == ["gpu-a", "gpu-b"]
    assert _complete(geotrain_home, "geotrain clusters show ") == ["east", "local"]
    assert _complete(geotrain_home, "geotrain clusters add-node east ") == ["gpu-a", "gpu-b"]
    assert _complete(geotrain_home, "geotrain workspaces deploy distributed-training --cluster e") == ["east"]
    assert _complete(geotrain_home, "geotrain workspaces deploy ") == ["distributed-training", "custom-training"]
    assert _complete(geotrain_home, "geotrain clusters deploy c1 --nodes gpu-a,") == ["gpu-a,gpu-b"]


def test_completion_without_a_data_directory_offers_nothing_and_creates_nothing(tmp_path):
    home = tmp_path / "never-made"
    assert _complete(home, "geotrain nodes show ") == []
    assert _complete(home, "geotrain clusters show ") == ["local"]
    assert not home.exists()


def test_completion_of_a_corrupt_database_offers_nothing(geotrain_home):
    geotrain_home.mkdir(parents=True)
    (geotrain_home / "state.sqlite3").write_bytes(b"not a database" * 100)
    assert _complete(geotrain_home, "geotrain workspaces show ") == []


def test_completion_command_prints_each_shells_script(capsys):
    from core.cli import main

    for shell in ("bash", "zsh", "fish"):
        assert main(["completion", shell]) == 0
        assert "_GEOTRAIN_COMPLETE" in capsys.readouterr().out
    assert main(["completion", "tcsh"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "tcsh" in err, err


def test_models_sizes_and_presets_complete_from_the_catalog(geotrain_home):
    from core.domain import recipe_catalog

    deploy = "geotrain workspaces deploy distributed-training "
    assert _complete(geotrain_home, deploy + "--model ") == sorted(recipe_catalog.models())
    assert _complete(geotrain_home, deploy + "--model gpt-neo --size ") == recipe_catalog.models()["gpt-neo"]
    assert _complete(geotrain_home, deploy + "--gradient-compression ") == list(recipe_catalog.presets())
