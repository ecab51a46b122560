"""Hostile names through the k3s/containerd/Volcano steps: every remote command of a 3-node
deploy parses (shlex) into exactly the arguments intended, and running them all in a
sandbox (every program but `touch` a no-op stub) never creates the canary an injection would.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from core.bootstrap import containerd, k3s, versions, volcano
from core.bootstrap.plan import ClusterPlan, DeployContext, NodeSpec, NodeTarget
from core.bootstrap.runner import run_steps
from core.bootstrap.session import CommandLog, NodeSession

CANARY = "CANARY"
NAMES = [f"gpu0;touch {CANARY}", f"$(touch {CANARY})", f"g'1\"`touch {CANARY}`\n&& x"]
BIN_DIR = f"/opt/geo bin/$(touch {CANARY})"
CONFIG_DIR = f"/etc/geo'; touch {CANARY}; '"
QUEUE = f"q`touch {CANARY}`"


def _deploy(tmp_path: Path, systemd: bool):
    bundle = tmp_path / f"bundle $(touch {CANARY}); x"
    bundle.mkdir()
    for name in ("k3s", "k3s-airgap-images-amd64.tar", versions.containerd_tarball("amd64")):
        (bundle / name).write_bytes(b"x")
    specs = [NodeSpec(name, f"198.51.100.{10 + i}", "server" if i == 0 else "agent",
                      mesh_ip=f"10.77.0.{i + 1}") for i, name in enumerate(NAMES)]
    plan = ClusterPlan("hostile", specs, subnet="10.77.0.0/24")
    plan.k3s.bin_dir, plan.k3s.config_dir, plan.k3s.bundle = BIN_DIR, CONFIG_DIR, str(bundle)
    plan.volcano.queue = QUEUE
    log = CommandLog()
    targets = {s.name: NodeTarget(s, NodeSession(s.name, None, None, log, [], dry_run=True),
                                  facts={"init": {"systemd": systemd}, "system": {"arch": "x86_64"},
                                         "gpus": [{"vendor": v} for v in ("nvidia", "amd")[i - 1:i]
                                                  if i]})
               for i, s in enumerate(specs)}
    ctx = DeployContext(plan, targets, log, secrets={"k3s-token": "t0ken"}, dry_run=True)
    ctx.shared["steps"] = ["containerd", "k3s", "volcano"]
    summary = run_steps(ctx, [containerd.STEP, k3s.STEP, volcano.STEP])
    assert summary.ok, summary.lines()
    return log


def _shell_commands(log):
    return [r.command for r in log.records if r.kind in ("fact", "change")]


@pytest.mark.parametrize("systemd", [True, False])
def test_every_command_parses_into_the_intended_arguments(tmp_path, systemd):
    log = _deploy(tmp_path, systemd)
    commands = _shell_commands(log)
    assert len(commands) > 40
    for command in commands:
        shlex.split(command)  # no unbalanced quote anywhere
    binary, kubeconfig = f"{BIN_DIR}/k3s", f"{CONFIG_DIR}/k3s.yaml"
    argvs = [shlex.split(c) for c in commands]
    assert ["mkdir", "-p", BIN_DIR, k3s.IMAGES_DIR] in argvs
    assert ["ctr", "--address", containerd.SOCKET, "-n", "k8s.io", "images", "import",
            f"{k3s.IMAGES_DIR}/k3s-airgap-images-amd64.tar"] in argvs
    assert any(a[:2] == [binary, "--version"] for a in argvs)
    kubectl = [a for a in argvs if "kubectl" in a]
    assert kubectl and all(a[:4] == [binary, "kubectl", "--kubeconfig", kubeconfig]
                           for a in kubectl if a[0] != "timeout" and a[0] != "sh")
    assert any(a[4:7] == ["get", "queue", QUEUE] for a in kubectl)
    waits = [shlex.split(a[4]) for a in argvs if a[0] == "timeout" and a[2:4] == ["sh", "-c"]]
    ready = next(w for w in waits if w[1:3] == ["sh", "-c"] and "get nodes" in w[3])
    assert ready[0] == "until" and ready[3].endswith(";")
    probe = ready[3][:-1]  # `until sh -c PROBE; do ...`: PROBE is one argument
    inner = shlex.split(probe.split("for n in ", 1)[1].split("; do", 1)[0])
    assert inner == [f"{name}=True" for name in sorted(NAMES)]
    server = [a for a in argvs if "geotrain-supervise" in a]
    if systemd:
        assert not server
    else:
        starts = {tuple(a[a.index("geotrain-supervise") + 1:a.index("</dev/null")])
                  for a in server}
        assert ("k3s", binary, "server", "--config", f"{CONFIG_DIR}/config.yaml") in starts
        assert ("k3s-agent", binary, "agent", "--config", f"{CONFIG_DIR}/config.yaml") in starts


def test_the_unit_execstart_holds_the_intended_arguments(tmp_path):
    log = _deploy(tmp_path, systemd=True)
    unit = next(r.content for r in log.records
                if r.kind == "put" and r.command.startswith("put /etc/systemd/system/k3s.service"))
    line = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    assert shlex.split(line[len("ExecStart="):]) == [f"{BIN_DIR}/k3s", "server", "--config",
                                                     f"{CONFIG_DIR}/config.yaml"]


def test_no_command_runs_the_injected_canary(tmp_path):
    """Every rendered command run by a real sh; only `touch` is real, so an injection shows."""
    log = _deploy(tmp_path, systemd=False)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for program in ("curl", "grep", "sed", "sha256sum", "chmod", "mv", "mkdir", "tar", "rm",
                    "ctr", "timeout", "systemctl", "setsid", "kill", "cat", "test", "head",
                    "apt-get", "gpg", "stat", "echo", "printf", "command", "sleep", "id"):
        stub = stubs / program
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    os.symlink("/usr/bin/touch", stubs / "touch")
    work = tmp_path / "work"
    work.mkdir()
    for command in _shell_commands(log):
        subprocess.run(["/bin/sh", "-c", command], cwd=work, timeout=20,
                       env={"PATH": str(stubs), "HOME": str(work)}, capture_output=True)
    assert not list(tmp_path.rglob(CANARY)) and not Path("/", CANARY).exists()
    assert not Path("/tmp", CANARY).exists()
