"""The drill-down on Kubernetes (issue 43): `workspaces pods` lists a workspace's pods (node,
datacenter, phase, restarts, last events) and describes them, through the real `kubernetes` client
against FakeKubeAPI, the stand-in API server (a real API server cannot run here); `workspaces
shell` opens `kubectl exec -it` through the client's websocket.

What the exec tests can show: the request the client builds (pod, container, the fixed command,
stdin/stdout/stderr/tty as kubectl sets them) and the pod's output relayed to this terminal, over
the stand-in's real websocket (Kubernetes' v4 channel protocol). The stand-in does not read what
the client sends (stdin, the resize channel) nor run a shell, so the interactive half (typing into
the pod's shell, its exit code) is not shown here; exit_code is tested on the Status a kubelet sends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import InvalidInput
from core.kubernetes import pod_shell
from core.workspaces import WorkspaceService
from tests.kubernetes.conftest import run
from tests.kubernetes.test_export_from_pods import _deploy

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "Back-off restarting \x1b]52;c;cm0gLXJmIH4=\x07failed container\x1b[2J"


def _place(fake, pod: str, node: str, dc: str) -> None:
    with fake.cond:
        spec = fake.objects[("pods", "default", pod)].setdefault("spec", {})
        spec["nodeName"] = node
        spec["containers"] = [{"name": "trainer", "image": "pytorch/pytorch:2.5.1",
                               "env": [{"name": "GEOTRAIN_DATACENTER", "value": dc},
                                       {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]


def test_pods_list_node_datacenter_phase_restarts_and_last_events(fake, kubeconfig, capsys):
    ws, master, worker = _deploy(fake, kubeconfig, capsys)
    _place(fake, master, "gpu-a", "ams")
    _place(fake, worker, "gpu-b", "fra")
    fake.restart_container(worker, reason="Error", exit_code=137)
    fake.add_event(worker, "BackOff", HOSTILE, kind="Warning")
    rows = WorkspaceService().processes(ws.id)
    assert [(r.name, r.rank, r.node, r.datacenter, r.state, r.restarts) for r in rows] == [
        (master, 0, "gpu-a", "ams", "Running", 0), (worker, 1, "gpu-b", "fra", "Running", 1)]
    assert "Warning BackOff: Back-off restarting failed container" in rows[1].events[-1]
    detail = dict(rows[1].detail)
    assert detail["node"] == "gpu-b" and detail["restarts"] == "1" and detail["image"] == "pytorch/pytorch:2.5.1"
    assert "WANDB_API_KEY (from a Secret)" in detail["env"] and "exit code 137" in detail["last state"]
    code, out, err = run(capsys, "workspaces", "pods", ws.id, "--describe")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "NODE", "DATACENTER", "STATE", "RESTARTS", "LAST", "EVENT"]
    assert lines[2].split()[:5] == [worker, "gpu-b", "fra", "Running", "1"]
    assert "\x1b" not in out and "\x07" not in out  # the kubelet's words reach no terminal escape


def test_a_shell_opens_kubectl_exec_it_through_the_client(fake, kubeconfig, capsys, tmp_path):
    ws, master, worker = _deploy(fake, kubeconfig, capsys)
    fake.exec_output[worker] = [b"trainer@", b"pod:/workspace$ ", HOSTILE.encode()[:20]]
    backend = WorkspaceService().backend("mycluster")
    reader, writer = os.pipe()
    os.write(writer, b"ls\n")
    out, err = tmp_path / "out", tmp_path / "err"
    ws_client = pod_shell.open_exec(backend.api, worker, "default", "trainer", tty=False)
    with open(out, "wb") as out_file, open(err, "wb") as err_file:
        code = pod_shell.relay(ws_client, reader, out_file, err_file)
    pod_shell.close(ws_client)  # the stand-in closed first: no error either way
    os.close(reader)
    os.close(writer)
    assert code == 0 and out.read_bytes() == b"trainer@pod:/workspace$ " + HOSTILE.encode()[:20]
    pod, query = fake.execs[-1]
    assert pod == worker
    assert {k: query[k] for k in ("container", "command", "stdin", "stdout", "stderr", "tty")} == {
        "container": ["trainer"], "command": pod_shell.SHELL_COMMAND, "stdin": ["true"], "stdout": ["true"],
        "stderr": ["true"], "tty": ["false"]}
    pod_shell.close(pod_shell.open_exec(backend.api, master, "default", "trainer", tty=True))
    _, query = fake.execs[-1]
    assert (query["tty"], query["stderr"], query["stdin"]) == (["true"], ["false"], ["true"])  # kubectl exec -it


def test_the_shell_command_runs_the_exec_from_the_cli(fake, kubeconfig, capsys, geotrain_home):
    ws, master, worker = _deploy(fake, kubeconfig, capsys)
    fake.exec_output[master] = [b"hello from the pod\n"]
    done = subprocess.run([sys.executable, "-m", "core.cli", "workspaces", "shell", ws.id, "--rank", "0"],
                          cwd=ROOT, env=dict(os.environ), input=b"exit\n", capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"hello from the pod\n"
    assert f"pod {master} of {ws.id}".encode() in done.stderr
    assert [pod for pod, _ in fake.execs] == [master]


def test_a_pod_that_is_not_running_or_a_rank_it_lacks_is_one_line(fake, kubeconfig, capsys):
    ws, master, worker = _deploy(fake, kubeconfig, capsys)
    fake.end_container(worker, 1, reason="Error")
    service = WorkspaceService()
    with pytest.raises(InvalidInput, match="is Failed, not Running"):
        service.shell(ws.id, 1)
    with pytest.raises(InvalidInput, match="--rank 5 is not a pod"):
        service.shell(ws.id, 5)
    assert fake.execs == []


@pytest.mark.parametrize("status, code", [
    (b"", 0), (json.dumps({"status": "Success"}).encode(), 0),
    (json.dumps({"status": "Failure", "reason": "NonZeroExitCode",
                 "details": {"causes": [{"reason": "ExitCode", "message": "42"}]}}).encode(), 42),
    (json.dumps({"status": "Failure", "message": "command terminated"}).encode(), 1), (b"[[[", 1), (b"[]", 1)])
def test_the_exit_code_comes_from_the_error_channels_status(status, code):
    assert pod_shell.exit_code(status) == code
