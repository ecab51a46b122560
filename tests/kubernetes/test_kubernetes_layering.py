"""Only the Kubernetes modules of core import `kubernetes`; the CLI loads it only when used."""

from __future__ import annotations

import subprocess
import sys

from tests.kubernetes.conftest import REPO

KUBERNETES_MODULES = {"core/kubernetes/client.py", "core/kubernetes/pod_logs.py", "core/kubernetes/registration.py",
                      "core/kubernetes/pod_files.py", "core/kubernetes/pod_shell.py", "core/backends/kubernetes.py",
                      "core/backends/kubernetes_drilldown.py", "core/backends/kubernetes_notify.py",
                      "core/backends/kubernetes_check.py",
                      "core/kubernetes/cordon.py"}


def test_only_the_kubernetes_modules_import_the_client():
    importers = set()
    for path in (REPO / "core").rglob("*.py"):
        for line in path.read_text().splitlines():
            if line.strip().startswith(("import kubernetes", "from kubernetes")):
                importers.add(str(path.relative_to(REPO)))
    assert importers == KUBERNETES_MODULES


def test_cli_and_manifests_do_not_load_the_client():
    code = ("import sys, core.cli, core.kubernetes.manifests, core.kubernetes.admission, core.kubernetes.node_groups;"
            "cli = core.cli.build_parser(); [cli.commands[g].list_commands(None) for g in core.cli.GROUPS];"
            "print([m for m in sys.modules if m.split('.')[0] == 'kubernetes'])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr
