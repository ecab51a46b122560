"""Only core/nodes/ssh.py (with its part ssh_sftp.py) talks to paramiko; everything else goes
through core.nodes.ssh (~/.ssh/config is read by geotrain's own parser, which runs nothing)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_only_core_ssh_imports_paramiko():
    importers = sorted(
        str(path.relative_to(ROOT)) for folder in ("core", "tui") for path in (ROOT / folder).rglob("*.py")
        if any(line.strip().startswith(("import paramiko", "from paramiko"))
               for line in path.read_text().splitlines()))
    assert importers == ["core/nodes/ssh.py", "core/nodes/ssh_sftp.py"]


def test_no_auto_add_host_key_policy_anywhere():
    for path in (ROOT / "core").rglob("*.py"):
        text = path.read_text()
        assert "AutoAddPolicy" not in text and "WarningPolicy" not in text, path
