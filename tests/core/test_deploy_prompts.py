"""`workspaces deploy` on a terminal asks (editor first, then hidden tokens); with --yes or
without a terminal it asks nothing, as before. Real pseudo-terminals (pexpect), a real
editor process ($EDITOR is a small script), real local deploys deleted at once."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pexpect

from core.state.secret_store import SecretStore
from core.workspaces import WorkspaceService

ROOT = Path(__file__).resolve().parents[2]
HF_SECRET = "hf_prompted_Secret_0123456789"
QUESTION = "Open the detailed config in your editor before submitting?"


def _editor(tmp_path) -> tuple[str, Path]:
    """An $EDITOR that records that it ran and shortens the run to 3 steps."""
    marker = tmp_path / "editor-ran"
    script = tmp_path / "editor.py"
    script.write_text("import sys, pathlib\n"
                      f"pathlib.Path({str(marker)!r}).write_text('yes')\n"
                      "p = pathlib.Path(sys.argv[1])\n"
                      "p.write_text(p.read_text().replace('steps: 200', 'steps: 3'))\n")
    return f"{sys.executable} {script}", marker


def _env(tmp_path, geotrain_home) -> dict:
    editor, _ = _editor(tmp_path)
    env = dict(os.environ, EDITOR=editor, GEOTRAIN_HOME=str(geotrain_home), PYTHONPATH=str(ROOT))
    env.pop("VISUAL", None)
    return env


def _spawn(args, env) -> pexpect.spawn:
    return pexpect.spawn(sys.executable, ["-m", "core.cli", "workspaces", "deploy", *args], cwd=str(ROOT),
                         env=env, encoding="utf-8", timeout=90, dimensions=(40, 200))


def _only_workspace():
    service = WorkspaceService()
    [ws] = service.list(refresh=False)
    return service, ws


def test_on_a_terminal_it_offers_the_editor_and_asks_tokens_hidden(tmp_path, geotrain_home):
    _, marker = _editor(tmp_path)
    child = _spawn(["distributed-training"], _env(tmp_path, geotrain_home))
    child.logfile_read = seen = io.StringIO()  # everything the terminal showed
    child.expect_exact(QUESTION)
    child.sendline("y")
    child.expect_exact("Hugging Face token (hidden; empty to skip): ")
    child.sendline(HF_SECRET)
    child.expect_exact("W&B API key (hidden; empty to skip): ")
    child.sendline("")
    child.expect_exact("the run logs offline")
    child.expect_exact("Deployed ")
    child.expect(pexpect.EOF)
    child.close()
    transcript = seen.getvalue()
    assert child.exitstatus == 0
    assert marker.exists(), "the editor was opened"
    service, ws = _only_workspace()
    try:
        assert ws.spec.steps == 3 and ws.spec.config["steps"] == 3  # the edit was submitted
        assert set(ws.spec.tokens) == {"hf"}  # empty W&B answer skipped it
        assert SecretStore().get(ws.spec.tokens["hf"]) == HF_SECRET
        assert HF_SECRET not in transcript and "Hugging Face token" in transcript  # not echoed
    finally:
        service.delete(ws.id)


def test_yes_on_a_terminal_asks_nothing(tmp_path, geotrain_home):
    _, marker = _editor(tmp_path)
    child = _spawn(["distributed-training", "--steps", "3", "--yes"], _env(tmp_path, geotrain_home))
    index = child.expect_exact(["Deployed ", QUESTION, "token"])
    child.expect(pexpect.EOF)
    child.close()
    assert index == 0 and child.exitstatus == 0
    assert not marker.exists()
    service, ws = _only_workspace()
    service.delete(ws.id)
    assert ws.spec.tokens == {}


def test_without_a_terminal_nothing_is_asked_as_before(tmp_path, geotrain_home):
    _, marker = _editor(tmp_path)
    out = subprocess.run([sys.executable, "-m", "core.cli", "workspaces", "deploy", "distributed-training",
                          "--steps", "3"], cwd=ROOT, env=_env(tmp_path, geotrain_home),
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    assert QUESTION not in out.stdout + out.stderr and "token" not in out.stdout + out.stderr
    assert out.stdout.startswith("Deployed ") and out.stderr == ""
    assert not marker.exists()
    service, ws = _only_workspace()
    service.delete(ws.id)
    assert ws.spec.steps == 3 and ws.spec.tokens == {}
