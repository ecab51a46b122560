"""Hostile exports handed to `workspaces deploy --resume-from DIR` (issue 38 finding 9).

Step folders named with other scripts' digits (`step_٠٠٠٠٠٩٩٩`, which int() reads as 999)
announced "continues at step 999" and seeded nothing; now only ASCII digits name a step, so
such an export holds no checkpoint (one line, nothing stored). A string `loss` in the export's
metrics.jsonl reached the state database and broke `workspaces list` and the app on every
later run; now a metrics row whose numbers are not numbers is skipped, and a bad value that
an older geotrain already stored reads as no loss.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from core.backends.export import MANIFEST, read_export
from core.backends.local.backend import LocalBackend
from core.cli import main
from core.errors import InvalidInput
from core.state.store import Store
from core.workspaces import DeployRequest, WorkspaceService


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOTRAIN_HOME", str(tmp_path / "home"))
    for name in ("WANDB_API_KEY", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    Store()
    return tmp_path / "home"


def _snapshot(home: Path) -> dict[str, str]:
    return {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(home.rglob("*"))
            if p.is_file() and not p.name.endswith(("-wal", "-shm", ".lock"))}


def _export(root: Path, steps: list[str], metrics: str = '{"step": 4, "loss": 1.0}\n',
            rank_names: tuple[str, ...] = ("rank_0",)) -> Path:
    (root / "checkpoints").mkdir(parents=True)
    (root / MANIFEST).write_text(json.dumps({"format": 1}))
    (root / "spec.yaml").write_text("model: gpt-neo\nworkers: 1\n")
    for step in steps:
        (root / "checkpoints" / step).mkdir()
        for rank in rank_names:
            (root / "checkpoints" / step / f"{rank}.pt").write_bytes(b"w")
            (root / "checkpoints" / step / f"{rank}.json").write_text("{}")
    (root / "metrics.jsonl").write_text(metrics)
    return root


OTHER_DIGITS = {"arabic-indic": "step_٠٠٠٠٠٩٩٩", "fullwidth": "step_０００００９９９",
                "devanagari": "step_००००००९९", "mixed": "step_00000९99"}


@pytest.mark.parametrize("name", list(OTHER_DIGITS))
def test_step_folders_in_other_digits_are_no_checkpoint(tmp_path, home, capsys, name):
    export = _export(tmp_path / "exp", [OTHER_DIGITS[name]])
    with pytest.raises(InvalidInput, match="holds no checkpoint"):
        read_export(export)
    before = _snapshot(home)
    code = main(["workspaces", "deploy", "distributed-training", "--resume-from", str(export), "--workers", "1"])
    captured = capsys.readouterr()
    assert code == 2 and "continues" not in captured.out, captured
    assert captured.err.count("\n") == 1 and "holds no checkpoint" in captured.err, captured.err
    assert _snapshot(home) == before


def test_the_newest_ascii_step_is_the_one_resumed(tmp_path):
    export = _export(tmp_path / "exp", ["step_00000004", OTHER_DIGITS["arabic-indic"]])
    assert (read_export(export).step, read_export(export).ranks) == (4, 1)
    odd = _export(tmp_path / "odd", ["step_00000006"], rank_names=("rank_0", "rank_١", "rank_" + "1" * 200))
    assert (read_export(odd).step, read_export(odd).ranks) == (6, 1)


class _NotStarted(LocalBackend):
    """The real local backend, its supervisor not started (a test double: no training here)."""

    def _start_supervisor(self, run_dir, env):
        return None


BAD_METRICS = "\n".join(['{"step": 2, "loss": 1.5}', '{"step": 4, "loss": "oops"}', '{"step": 5, "loss": NaN}',
                         '{"step": 6, "loss": 1e999}', '{"step": 7, "loss": ' + "9" * 400 + "}",
                         '{"step": "8", "loss": 0.5}', '{"step": 9, "loss": [1]}', "[" * 50_000, "[]"]) + "\n"


def test_a_string_loss_in_the_export_never_reaches_the_database(tmp_path, home, capsys, monkeypatch):
    export = read_export(_export(tmp_path / "exp", ["step_00000004"], BAD_METRICS))
    service = WorkspaceService()
    monkeypatch.setattr(service, "backend", lambda cluster: _NotStarted())
    spec = service.build_spec(DeployRequest(steps=8, workers=1))
    ws = service.deploy(spec, {}, resume_from=export)
    assert [w.last_loss for w in service.list()] == [1.5]  # the last row whose numbers are numbers
    assert [(r["step"], r["loss"]) for r in service.metrics(ws.id)] == [(2, 1.5)]
    with contextlib.closing(sqlite3.connect(home / "state.sqlite3")) as conn:
        assert conn.execute("SELECT typeof(last_loss) FROM workspaces").fetchall() == [("real",)]
    for argv in (["workspaces", "list"], ["workspaces", "list", "--json"], ["workspaces", "show", ws.id]):
        assert main(argv) == 0, capsys.readouterr().err
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("stored", ["oops", b"\x00\xff", "NaN", float("inf")])
def test_a_bad_loss_already_stored_reads_as_none(home, capsys, stored):
    """What an older geotrain wrote from such an export: `workspaces list` works, nothing is rewritten."""
    with contextlib.closing(sqlite3.connect(home / "state.sqlite3", isolation_level=None)) as conn:
        conn.execute("INSERT INTO workspaces(id, cluster, spec, status, created_at, updated_at, last_loss)"
                     " VALUES ('gpt-neo-0000aa', 'local', ?, 'COMPLETED', 0, 0, ?)",
                     (json.dumps({"cluster": "local", "model": "gpt-neo", "size": "tiny", "preset": "medium",
                                  "workers": 1, "steps": 5}), stored))
    before = _snapshot(home)
    assert [w.last_loss for w in WorkspaceService().list()] == [None]
    assert main(["workspaces", "list"]) == 0 and main(["workspaces", "list", "--json"]) == 0
    out = capsys.readouterr()
    assert "Traceback" not in out.err and '"last_loss": null' in out.out
    assert _snapshot(home) == before
