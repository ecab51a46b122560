"""A custom-training spec from hostile or mistaken input: the command is argv (never a shell), the
working directory is one the user named, read within the recipes' delivery bounds; each refusal is
one line saying what to do, and nothing is stored."""

import os
import shlex

import pytest

from core.domain.custom_training import WORKDIR_SUFFIXES, workdir_files
from core.errors import InvalidInput
from core.kubernetes.recipes_delivery import MAX_FILE_BYTES, MAX_TOTAL_BYTES
from core.workspaces import DeployRequest, WorkspaceService


def _custom(**kwargs) -> DeployRequest:
    return DeployRequest(template="custom-training", **kwargs)


def test_the_command_is_argv_and_the_workdir_absolute(tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    spec = WorkspaceService().build_spec(_custom(command="python train.py --name 'a b' ; rm -rf ~",
                                                 workdir=str(tmp_path), workers=2, preset="high"))
    # the semicolon and the tilde are words of argv: no shell ever sees them
    assert spec.command == ["python", "train.py", "--name", "a b", ";", "rm", "-rf", "~"]
    assert (spec.workdir, spec.model, spec.preset, spec.workers) == (str(tmp_path), "custom", "high", 2)
    assert spec.config == {}


@pytest.mark.parametrize("command, said", [
    (None, "needs --command"), ("   ", "needs --command"), ("python 'unclosed", "cannot be split"),
    ("python train.py \x1b[31mred", "not printable"), ("x " * 80, "1 to 64"),
    ("python " + "a" * 5000, "over 4096"),
], ids=["missing", "blank", "unclosed-quote", "escape", "too-many-words", "too-long"])
def test_a_bad_command_is_one_line_and_nothing_is_stored(tmp_path, command, said):
    service = WorkspaceService()
    with pytest.raises(InvalidInput) as caught:
        service.build_spec(_custom(command=command, workdir=str(tmp_path)))
    assert said in caught.value.message and "\n" not in caught.value.message
    assert service.list(refresh=False) == []


def test_the_workdir_is_a_named_directory_within_the_bounds(tmp_path):
    service = WorkspaceService()
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for workdir, said in ((tmp_path / "absent", "does not exist"), (tmp_path / "link", "not a directory"),
                          ("bad\x07path", "not a printable path")):
        with pytest.raises(InvalidInput, match=said):
            service.build_spec(_custom(command="python train.py", workdir=str(workdir)))
    big = tmp_path / "big"
    big.mkdir()
    (big / "weights.bin").write_bytes(b"\0" * (MAX_FILE_BYTES + 1))  # not shipped: no limit applies
    (big / "secret.txt").symlink_to("/etc/passwd")  # a link is never read
    outside = tmp_path / "outside.py"
    outside.write_text("SECRET = 1\n")
    (big / "train.py").write_text("print(1)\n")
    (big / ".credentials.json").write_text("{}")  # a dotfile: often a secret, never shipped
    (big / ".git").mkdir()
    (big / ".git" / "config.yaml").write_text("x")
    assert [rel for rel, _ in workdir_files(big)] == ["train.py"]
    (big / "data.txt").write_text("x" * (MAX_FILE_BYTES + 1))
    with pytest.raises(InvalidInput, match="over the 256 KiB") as caught:
        service.build_spec(_custom(command="python train.py", workdir=str(big)))
    assert "--image" in caught.value.hint
    (big / "data.txt").unlink()
    for i in range(MAX_TOTAL_BYTES // MAX_FILE_BYTES + 1):
        (big / f"part{i}.py").write_text("#" * MAX_FILE_BYTES)
    with pytest.raises(InvalidInput, match="over 4 MiB"):
        service.build_spec(_custom(command="python train.py", workdir=str(big)))
    assert ".py" in WORKDIR_SUFFIXES and ".bin" not in WORKDIR_SUFFIXES


def test_catalog_settings_and_command_fields_do_not_mix(tmp_path):
    service = WorkspaceService()
    with pytest.raises(InvalidInput, match="describe a catalog run"):
        service.build_spec(_custom(command="python t.py", sets=("optim.lr=1",)))
    from core.domain.records import WorkspaceSpec

    with pytest.raises(Exception, match="custom-training"):
        WorkspaceSpec.from_dict({"cluster": "local", "model": "gpt-neo", "size": "tiny", "preset": "medium",
                                 "workers": 1, "steps": 5, "command": ["python", "x.py"]})


def test_dry_run_shows_the_argv_quoted(tmp_path):
    import subprocess
    import sys

    (tmp_path / "train.py").write_text("")
    out = subprocess.run([sys.executable, "-m", "core.cli", "workspaces", "deploy", "custom-training", "--dry-run",
                          "--workdir", str(tmp_path), "--command", "python train.py --tag 'x; y'"],
                         capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"cd {shlex.quote(str(tmp_path))}" in out.stdout and "train.py --tag 'x; y'" in out.stdout
