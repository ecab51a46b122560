"""Notifications of a Kubernetes workspace (issue 43), sent by its watcher in the cluster.

The cluster is tests/kubernetes/fake_api_server.py (a stand-in: no API server runs here) playing the
API server, kubelet and Volcano's syncJob; the watcher runs as its own process with the arguments its
Deployment renders; the webhook is a real http.server on 127.0.0.1. The CLI makes and removes the
Secret through the real kubernetes client.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest

from core.backends.kubernetes import KubernetesBackend
from core.domain.records import Cluster
from core.kubernetes.notify_secret import NOTIFY_FILE
from tests.core.test_notifications import HOOK_PATH, Hook
from tests.faults.faults import wait_for
from tests.kubernetes.conftest import fake, geotrain_home, kubeconfig, make_spec, run, write_kubeconfig  # noqa: F401
from tests.kubernetes.test_watcher import K8S

REPO = Path(__file__).resolve().parents[2]
SECRET_PATH = HOOK_PATH  # the part of the address that is its credential


@pytest.fixture
def webhook():
    hook = Hook()  # a real HTTP server on 127.0.0.1 (tests/core/test_notifications.py)
    yield hook
    hook.close()


def _cluster(fake, tmp_path) -> Cluster:
    return Cluster(name="dc", kind="kubernetes", kubeconfig_path=write_kubeconfig(tmp_path / "kc", fake.url),
                   config={"context": "fake-ctx", "node_groups": [{"vendor": "cpu", "gpus": 0, "nodes": ["a", "b"]}]})


def _history(fake, job: str) -> list[dict]:
    return json.loads(fake.objects[("configmaps", "default", f"{job}-history")]["data"]["history.json"])


def _start(fake, args: list[str], url_file: Path, cwd: Path) -> subprocess.Popen:
    args = list(args)
    args[args.index("--notify-file") + 1] = str(url_file)
    args[args.index("--poll-s") + 1] = "0.2"
    if "--store-port" in args:  # an elastic workspace: its store on a free port
        args[args.index("--store-port") + 1] = "0"
        args += ["--store-host", "127.0.0.1"]
        token = cwd / "token"
        if not token.exists():
            token.write_text(fake.objects[("secrets", "default", "gt-ws-n-store-token")]["stringData"]["token"])
        args[args.index("--store-token-file") + 1] = str(token)
    return subprocess.Popen([sys.executable, "-m", "recipes.watcher", *args, "--api", fake.url],
                            env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    return proc.communicate(timeout=30)[0]


def test_the_watcher_sends_a_recovery_and_the_completion_once_each(fake, tmp_path, webhook):
    fake.replace_deleted_pods = True  # the stand-in plays Volcano's syncJob
    backend = KubernetesBackend(_cluster(fake, tmp_path))
    backend.deploy("ws-n", make_spec(cluster="dc", workers=2, recovery={"max_recoveries": 2}), {})
    backend.set_notify_url("ws-n", webhook.url)
    secret = fake.objects[("secrets", "default", "gt-ws-n-notify")]
    assert secret["stringData"] == {"url": webhook.url}
    kubernetes_validate.validate(secret, K8S, strict=True)
    deployment = fake.objects[("deployments", "default", "gt-ws-n-watcher")]
    kubernetes_validate.validate(deployment, K8S, strict=True)
    pod = deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "notify"]
    assert volume["secret"] == {"secretName": "gt-ws-n-notify", "defaultMode": 0o400, "optional": True,
                                "items": [{"key": "url", "path": "url"}]}
    command = pod["containers"][0]["command"]
    assert command[command.index("--notify-file") + 1] == NOTIFY_FILE
    args = command[command.index("watcher") + 1:]  # what the pod passes as "$@"
    # kubelet's part (a stand-in): the Secret's value as the pod's 0400 file
    url_file = tmp_path / "url"
    url_file.write_text(secret["stringData"]["url"])
    url_file.chmod(0o400)

    fake.set_job_phase("gt-ws-n", "Running")
    worker = fake.add_pod("gt-ws-n", "worker", 0)
    first_uid = fake.objects[("pods", "default", worker)]["metadata"]["uid"]
    watcher = _start(fake, args, url_file, tmp_path)
    output = ""
    try:
        wait_for(lambda: json.loads(fake.objects[("configmaps", "default", "gt-ws-n-history")]["data"]
                                    ["watcher.json"]).get("running") == 1, 60, "the watcher's first look", 0.05)
        fake.end_container(worker, 137, reason="Error")
        wait_for(lambda: fake.objects[("pods", "default", worker)]["metadata"]["uid"] != first_uid, 60,
                 "the replacement pod", 0.05)
        fake.start_container(worker)
        fake.write_log(worker, b'geotrain-event {"kind": "resumed", "at": 1.0, "rank": 1, "step": 8}\n')
        wait_for(lambda: len(webhook.received) == 1, 60, "the RECOVERED message", 0.05)
        fake.set_job_phase("gt-ws-n", "Completed")
        wait_for(lambda: len(webhook.received) == 2, 60, "the COMPLETED message", 0.05)
        wait_for(lambda: "COMPLETED" in json.loads(fake.objects[("configmaps", "default", "gt-ws-n-history")]
                                                   ["data"]["watcher.json"]).get("notified", []),
                 60, "the COMPLETED message kept as sent", 0.05)
    finally:
        output += _stop(watcher)

    # a watcher started again (its pod replaced) reads what was sent and sends nothing twice
    puts = sum(1 for m, p, _ in fake.requests if m == "PUT" and p.endswith("/configmaps/gt-ws-n-history"))
    again = _start(fake, args, url_file, tmp_path)
    try:
        wait_for(lambda: sum(1 for m, p, _ in fake.requests
                             if m == "PUT" and p.endswith("/configmaps/gt-ws-n-history")) > puts,
                 60, "the restarted watcher's first pass written", 0.05)
    finally:
        output += _stop(again)

    assert [(path, body["event"]) for path, body in webhook.received] == [(SECRET_PATH, "RECOVERED"),
                                                                         (SECRET_PATH, "COMPLETED")]
    recovered, completed = (body for _, body in webhook.received)
    assert set(recovered) == {"source", "workspace", "event", "detail", "at", "text"}  # the local notifier's shape
    assert recovered["workspace"] == "ws-n" and recovered["source"] == "geotrain"
    assert recovered["detail"].startswith("worker-0 training again at step 8 after")
    assert completed["text"] == "geotrain: workspace ws-n COMPLETED: the Volcano job ended Completed"
    assert [e["kind"] for e in _history(fake, "gt-ws-n")] == ["recovery", "recovered"]
    # the address: in its Secret, nowhere else the stand-in holds, never in the watcher's output
    host_and_path = webhook.url.split("//", 1)[1]
    assert "0 of 2 recoveries used" in output and SECRET_PATH not in output and host_and_path not in output
    elsewhere = {k: v for k, v in fake.objects.items() if k != ("secrets", "default", "gt-ws-n-notify")}
    assert elsewhere and SECRET_PATH not in json.dumps(list(elsewhere.values()))  # manifests, ConfigMaps, the history
    assert SECRET_PATH not in json.dumps([(m, p) for m, p, _ in fake.requests])  # no request path carries it


def _until_failed_handled(fake, args: list[str], url_file: Path, cwd: Path) -> str:
    """Run a watcher until it has handled the job's FAILED (kept in its state); its output."""
    watcher = _start(fake, args, url_file, cwd)
    try:
        wait_for(lambda: "FAILED" in json.loads(fake.objects[("configmaps", "default", "gt-ws-n-history")]
                                                ["data"]["watcher.json"]).get("notified", []),
                 60, "the FAILED event handled", 0.05)
    finally:
        output = _stop(watcher)
    return output


def test_a_failed_job_and_an_unreachable_webhook_are_one_line_without_the_address(fake, tmp_path, webhook):
    backend = KubernetesBackend(_cluster(fake, tmp_path))
    backend.deploy("ws-n", make_spec(cluster="dc", workers=2), {})
    deployment = fake.objects[("deployments", "default", "gt-ws-n-watcher")]
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    args = command[command.index("watcher") + 1:]
    url_file = tmp_path / "url"  # no Secret yet: no file, no notifications
    fake.set_job_phase("gt-ws-n", "Failed")
    output = _until_failed_handled(fake, args, url_file, tmp_path)
    assert webhook.received == [] and "notification" not in output  # no address: nothing sent, nothing said
    # an address whose server is gone: the failure is one line naming the event, never the address
    webhook.close()
    fake.objects[("configmaps", "default", "gt-ws-n-history")]["data"]["watcher.json"] = "{}"
    url_file.write_text(webhook.url)
    output = _until_failed_handled(fake, args, url_file, tmp_path)
    (line,) = [ln for ln in output.splitlines() if "notification" in ln]
    assert line == "geotrain watcher: notification FAILED not delivered after 3 tries: ConnectionRefusedError (errno 111)"
    assert SECRET_PATH not in output and str(webhook.server.server_port) not in output


def test_the_cli_puts_the_address_in_a_secret_and_removes_it(fake, kubeconfig, capsys, monkeypatch, webhook):
    assert run(capsys, "clusters", "add-kubernetes", "away", "--kubeconfig", kubeconfig)[0] == 0
    code, _, err = run(capsys, "workspaces", "deploy", "distributed-training", "--cluster", "away", "--model",
                       "gpt-neo", "--size", "tiny", "--workers", "2", "--steps", "20")
    assert code == 0, err
    (job,) = fake.jobs()
    ws, name = job["metadata"]["annotations"]["geotrain.io/workspace-id"], job["metadata"]["name"]
    key = ("secrets", "default", f"{name}-notify")
    monkeypatch.setenv("GEOTRAIN_NOTIFY_URL", webhook.url)
    code, out, err = run(capsys, "workspaces", "notify", ws)
    assert code == 0, err
    assert "sent by its watcher in the cluster" in out and SECRET_PATH not in out + err
    assert fake.objects[key]["stringData"] == {"url": webhook.url}
    monkeypatch.setenv("GEOTRAIN_NOTIFY_URL", webhook.url + "-2")  # a new address replaces the old
    assert run(capsys, "workspaces", "notify", ws)[0] == 0
    assert fake.objects[key]["stringData"] == {"url": webhook.url + "-2"} and fake.objects[key]["metadata"]["resourceVersion"] == "2"
    # a command would run on this machine: refused in one line, the Secret as it was
    code, out, err = run(capsys, "workspaces", "notify", ws, "--command", "notify-send geotrain")
    assert code != 0 and "runs on Kubernetes: a notification command would run on this machine" in err
    assert fake.objects[key]["stringData"] == {"url": webhook.url + "-2"}
    monkeypatch.setenv("GEOTRAIN_NOTIFY_URL", "ftp://nowhere")  # refused before the cluster is asked
    code, _, err = run(capsys, "workspaces", "notify", ws)
    assert code != 0 and "not an http:// or https:// URL" in err and "ftp://nowhere" not in err
    assert run(capsys, "workspaces", "notify", ws, "--off")[0] == 0
    assert key not in fake.objects
    monkeypatch.setenv("GEOTRAIN_NOTIFY_URL", webhook.url)
    assert run(capsys, "workspaces", "notify", ws)[0] == 0 and key in fake.objects
    home = Path(os.environ["GEOTRAIN_HOME"])  # nothing of the address on this machine (DB, secret store, logs)
    assert not [p for p in home.rglob("*") if p.is_file() and SECRET_PATH.encode() in p.read_bytes()]
    code, _, err = run(capsys, "workspaces", "delete", ws, "--yes")
    assert code == 0, err
    assert key not in fake.objects  # deleted with the workspace
