"""The workspace's watcher (recipes/watcher.py, core.kubernetes.watcher_manifests, issue 40).

Must show: the only geotrain process outside the "cluster" is gone, and recovery still happens.
The cluster is tests/kubernetes/fake_api_server.py (a stand-in: no API server runs here) playing
the API server, kubelet and Volcano's syncJob (a deleted pod of a live job is made again, same
name, new uid); the watcher runs as its own process, the entrypoint its Deployment runs, with
the arguments rendered in that Deployment.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import kubernetes_validate
import psutil
import pytest

from core.backends.kubernetes import KubernetesBackend
from core.domain.records import Cluster
from core.kubernetes import watcher_history
from core.kubernetes.admission import admission_errors
from core.kubernetes.manifests import render_manifests
from core.kubernetes.network_policy import WATCHER_LABEL
from core.kubernetes.pod_security import violations
from core.bootstrap import versions
from recipes.elastic_store_client import NetworkStore
from tests.faults.faults import wait_for
from tests.kubernetes.conftest import HETEROGENEOUS, job_validator, make_spec  # noqa: F401 (fixture)
from tests.kubernetes.conftest import fake, kubeconfig, write_kubeconfig  # noqa: F401 (fixtures)

REPO = Path(__file__).resolve().parents[2]
K8S = versions.k8s_minor(versions.K3S_VERSION) + ".0"
CLUSTER = Cluster(name="dc", kind="geotrain", config={"pod_security_enforce": "restricted"})


def _render(workers: int = 3, **recovery) -> dict[str, dict]:
    out = render_manifests("ws-w", make_spec(workers=workers, recovery=recovery), CLUSTER, HETEROGENEOUS,
                           "team", {})
    return {f"{m['kind']}/{m['metadata']['name']}": m for m in out}


def test_the_watcher_objects_pass_upstream_checks_and_allow_only_its_own_calls(job_validator):
    out = _render(workers=3, max_recoveries=5)
    job = out["Job/gt-ws-w"]
    assert not list(job_validator.iter_errors(job)) and admission_errors(job) == []
    assert job["metadata"]["annotations"]["geotrain.io/watcher"] == "gt-ws-w-watcher"
    assert job["spec"]["maxRetry"] == 5
    deployment, role = out["Deployment/gt-ws-w-watcher"], out["Role/gt-ws-w-watcher"]
    for kind in ("ConfigMap/gt-ws-w-history", "ServiceAccount/gt-ws-w-watcher", "Role/gt-ws-w-watcher",
                 "RoleBinding/gt-ws-w-watcher", "Deployment/gt-ws-w-watcher"):
        kubernetes_validate.validate(out[kind], K8S, strict=True)  # Kubernetes' own schemas, strict
        assert out[kind]["metadata"]["namespace"] == "team"
    pod = {**deployment["spec"]["template"]["spec"], "metadata": deployment["spec"]["template"]["metadata"]}
    assert violations(pod, "restricted") == []  # the trainers' profile
    labels = pod["metadata"]["labels"]
    assert labels[WATCHER_LABEL] == "ws-w" and "geotrain.io/workspace" not in labels  # not counted as a trainer
    fence = out["NetworkPolicy/gt-ws-w-peers"]["spec"]["ingress"][1]["from"][0]["podSelector"]["matchLabels"]
    assert fence == {WATCHER_LABEL: "ws-w"}  # the fence admits it on the store ports
    pods = [f"gt-ws-w-{t['name']}-{i}" for t in job["spec"]["tasks"] for i in range(t["replicas"])]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"], "resourceNames": pods},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"], "resourceNames": pods},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"],
         "resourceNames": ["gt-ws-w-history"]},
        {"apiGroups": ["batch.volcano.sh"], "resources": ["jobs"], "verbs": ["get"], "resourceNames": ["gt-ws-w"]}]
    command = pod["containers"][0]["command"]
    assert command[:2] == ["/bin/sh", "-c"] and "$@" in command[2] and "gt-ws-w" not in command[2]
    assert command[command.index("--max-recoveries") + 1] == "5"


@pytest.mark.parametrize("volcano,restart_pod", [("v1.11.0", True), ("v1.12.0", True), ("v1.10.0", False),
                                                 (None, False)])
def test_restart_pod_only_where_the_clusters_volcano_takes_it(job_validator, volcano, restart_pod):
    """RestartPod is in Volcano's policyActionMap from v1.11.0 (v1.10.0's webhook refuses the whole Job):
    only a cluster geotrain built records its Volcano; elsewhere a deleted pod is made again by syncJob alone."""
    config = {"volcano": {"version": volcano}} if volcano else {}
    out = render_manifests("ws-v", make_spec(workers=3), Cluster("dc", "geotrain", config=config), HETEROGENEOUS,
                           "team", {})
    job = out[-1]
    assert not list(job_validator.iter_errors(job)) and admission_errors(job) == []
    policies = [p for t in job["spec"]["tasks"] for p in t.get("policies", [])]
    has = {"event": "PodEvicted", "action": "RestartPod"} in policies
    assert has is restart_pod
    if has:
        assert all({"event": "PodEvicted", "action": "RestartPod"} in t["policies"] for t in job["spec"]["tasks"])
    assert "policies" not in job["spec"] and not any(p.get("event") == "PodFailed" for p in policies)


def _allowed(rules: list[dict], method: str, path: str) -> bool:
    """Whether a request is one the Role allows (RBAC: verb, resource, name; list has no name)."""
    parts = path.strip("/").split("/")
    if parts[-1] == "log":  # a subresource: pods/log of the named pod
        parts = [*parts[:-3], "pods/log", parts[-2]]
    resource, name = (parts[-1], None) if parts[-1] in ("pods", "configmaps", "jobs") else (parts[-2], parts[-1])
    verb = {"GET": "get" if name else "list", "PUT": "update", "DELETE": "delete", "POST": "create"}[method]
    return any(resource in r["resources"] and verb in r["verbs"]
               and (name is None and "resourceNames" not in r or name in r.get("resourceNames", [name]))
               for r in rules)


def _geotrain(*argv: str) -> subprocess.CompletedProcess:
    """The user's geotrain, as its own process that ends."""
    return subprocess.run([sys.executable, "-m", "core.cli", *argv], capture_output=True, text=True,
                          timeout=120, cwd=REPO)




def test_a_lost_pod_is_replaced_with_no_geotrain_process_outside_the_cluster(fake, kubeconfig, tmp_path):
    fake.replace_deleted_pods = True  # the stand-in plays Volcano's syncJob
    # a process with the CLI's command line and this home (a stand-in for a CLI left running): the check sees it
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "core.cli"], cwd=REPO)
    try:
        assert wait_for(lambda: _geotrain_processes(os.environ["GEOTRAIN_HOME"]), 30, "the check to see one", 0.05)
    finally:
        alive.kill()
        alive.wait()
    done = _geotrain("clusters", "add-kubernetes", "away", "--kubeconfig", kubeconfig)
    assert done.returncode == 0, done.stderr
    done = _geotrain("workspaces", "deploy", "distributed-training", "--cluster", "away", "--model", "gpt-neo",
                     "--size", "tiny", "--workers", "2", "--steps", "20")
    assert done.returncode == 0, done.stderr
    (deployed,) = fake.jobs()
    ws, job = deployed["metadata"]["annotations"]["geotrain.io/workspace-id"], deployed["metadata"]["name"]
    deployment = fake.objects[("deployments", "default", f"{job}-watcher")]
    role = fake.objects[("roles", "default", f"{job}-watcher")]
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    args = command[command.index("watcher") + 1:]  # what the pod passes as "$@"
    master, worker = fake.add_pod(job, "master", 0), fake.add_pod(job, "worker", 0)
    fake.set_job_phase(job, "Running")
    first = {name: fake.objects[("pods", "default", name)]["metadata"]["uid"] for name in (master, worker)}
    job_uid = fake.objects[("jobs", "default", job)]["metadata"]["uid"]
    before = len(fake.requests)

    # the cluster's only geotrain process from here on: the watcher, as its Deployment runs it, serving the
    # elastic store (a DiLoCo workspace) with the token its Secret holds, as the pod's 0400 file; on a free port
    secret = fake.objects[("secrets", "default", f"{job}-store-token")]["stringData"]["token"]
    token_file = tmp_path / "token"
    token_file.write_text(secret)
    token_file.chmod(0o400)
    assert args[args.index("--store-port") + 1] == "29401"
    args[args.index("--store-port") + 1] = "0"
    args[args.index("--store-token-file") + 1] = str(token_file)
    args[args.index("--poll-s") + 1] = "0.2"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    watcher = subprocess.Popen([sys.executable, "-m", "recipes.watcher", *args, "--store-host", "127.0.0.1",
                                "--api", fake.url], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    said = ""
    try:
        assert _geotrain_processes(os.environ["GEOTRAIN_HOME"]) == []  # the user's machine is "closed"
        said = watcher.stdout.readline() + watcher.stdout.readline()
        port = int(re.search(r"elastic store on 127\.0\.0\.1:(\d+)", said).group(1))
        wait_for(lambda: json.loads(fake.objects[("configmaps", "default", f"{job}-history")]["data"]
                                    ["watcher.json"]).get("running") == 2, 60, "the watcher's first look", 0.05)
        # two trainers of two datacenters meet in its store (what recipes.elastic writes there), then one leaves
        store = NetworkStore("127.0.0.1", port, secret.encode(), timedelta(seconds=30))
        store.set("gen0/outer/current", b"3")
        store.set("gen0/q/3/0/members", b"0:live:-1:dc-a;1:live:-1:dc-b;")
        wait_for(lambda: _quorum_of(fake, job) == {"outer_step": 3, "workers": 2, "datacenters": {"dc-a": 1, "dc-b": 1}},
                 60, "the quorum in the watcher's state", 0.05)
        store.set("gen0/outer/current", b"4")
        store.set("gen0/q/4/0/members", b"0:live:-1:dc-a;")
        wait_for(lambda: any(e["kind"] == "quorum" and e["left"] == ["dc-b"] for e in _history_of(fake, job)), 60,
                 "dc-b's leaving written down", 0.05)

        fake.write_log(master, b"[rank 0] step 12/20 loss 2.1000 lr 1.00e-03 outer 1 sent 0.1MB 5.0ms/step\n")
        fake.end_container(worker, 137, reason="Error")  # the node took the worker down
        replaced = wait_for(lambda: (p := fake.objects.get(("pods", "default", worker)))
                            and p["metadata"]["uid"] != first[worker] and p, 60, "the replacement pod", 0.05)
        fake.start_container(worker)  # kubelet starts it; its rank resumes from the step-8 checkpoint
        fake.write_log(worker, b'geotrain-event {"kind": "resumed", "at": 1.0, "rank": 1, "step": 8}\n')
        wait_for(lambda: any(e["kind"] == "recovered" for e in _history_of(fake, job)), 60, "the recovery written down",
                 0.05)
        assert watcher.poll() is None  # still watching
    finally:
        watcher.terminate()
        output = said + watcher.communicate(timeout=30)[0]
    assert "0 of 3 recoveries used" in output

    store.close()
    quorum = [e for e in _history_of(fake, job) if e["kind"] == "quorum"]
    assert [(e["datacenters"], e["left"], e["outer_step"]) for e in quorum] == [
        (["dc-a", "dc-b"], [], 3), (["dc-a"], ["dc-b"], 4)]
    history = [e for e in _history_of(fake, job) if e["kind"] != "quorum"]
    assert [e["kind"] for e in history] == ["recovery", "recovered"], history
    assert history[0]["cause"] == "pod worker-0 failed: Error, exit code 137"
    assert (history[0]["scope"], history[0]["attempt"], history[0]["budget"]) == ("pod", 1, 3)
    assert history[1]["worker"] == "worker-0" and history[1]["downtime_s"] >= 0
    assert (history[1]["step"], history[1]["steps_lost"]) == (8, 4)  # reached 12, resumed at 8
    # only the lost pod restarted: the master kept its pod, the job was never resubmitted
    assert fake.objects[("pods", "default", master)]["metadata"]["uid"] == first[master]
    assert replaced["metadata"]["uid"] != first[worker]
    assert fake.objects[("jobs", "default", job)]["metadata"]["uid"] == job_uid
    calls = [(m, p) for m, p, _ in fake.requests[before:]]
    assert ("DELETE", f"/api/v1/namespaces/default/pods/{worker}") in calls
    assert all(_allowed(role["rules"], m, p) for m, p in calls), calls  # nothing its Role does not allow

    # the user's side comes back and only reads: the watcher's history, no resubmission
    done = _geotrain("workspaces", "show", ws)
    assert done.returncode == 0, done.stderr
    assert "recovery: pod worker-0 failed: Error, exit code 137 — recovering worker-0 (pod, 1 of 3)" in done.stdout
    assert "recovered: worker-0 training again at step 8 after" in done.stdout and "4 steps lost" in done.stdout
    assert "watcher (in the cluster): last seen" in done.stdout and "1 of 3 recoveries used" in done.stdout
    assert "; quorum at outer step 4: dc-a (1 worker)" in done.stdout
    assert "quorum: dc-a in the quorum at outer step 4 (1 workers); dc-b left" in done.stdout
    assert fake.objects[("jobs", "default", job)]["metadata"]["uid"] == job_uid


def test_the_budget_is_kept_across_a_restarted_watcher_and_then_given_up(fake, tmp_path):
    """A watcher that restarts reads its history back: the budget is never counted twice."""
    from recipes.watcher import Api, Watcher

    cluster = Cluster(name="dc", kind="kubernetes", kubeconfig_path=write_kubeconfig(tmp_path / "kc", fake.url),
                      config={"context": "fake-ctx", "node_groups": [{"vendor": "cpu", "gpus": 0, "nodes": ["a", "b"]}]})
    fake.replace_deleted_pods = True
    KubernetesBackend(cluster).deploy("ws-b", make_spec(cluster="dc", workers=2, recovery={"max_recoveries": 1}), {})
    fake.set_job_phase("gt-ws-b", "Running")
    worker = fake.add_pod("gt-ws-b", "worker", 0)
    first = Watcher(Api(fake.url), "default", "gt-ws-b", "gt-ws-b-history", 1)
    first.poll()
    fake.end_container(worker, 1)
    first.poll()
    assert [e["kind"] for e in _history_of(fake, "gt-ws-b")] == ["recovery"]
    fake.start_container(worker)
    fake.end_container(worker, 1)  # the replacement fails too; a new watcher takes over
    second = Watcher(Api(fake.url), "default", "gt-ws-b", "gt-ws-b-history", 1)
    assert second.used == 1
    uid = fake.objects[("pods", "default", worker)]["metadata"]["uid"]
    second.poll()
    second.poll()
    assert [e["kind"] for e in _history_of(fake, "gt-ws-b")] == ["recovery", "gave_up"]
    assert fake.objects[("pods", "default", worker)]["metadata"]["uid"] == uid  # left as it is
    assert KubernetesBackend(cluster).history("ws-b")[-1]["cause"] == "pod worker-0 failed: Error, exit code 1"


def _geotrain_processes(home: str) -> list[psutil.Process]:
    """This test's geotrain CLI or app processes (its GEOTRAIN_HOME: other work on the machine is not ours)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(part in ("core.cli", "tui.entry") or part.endswith("/geotrain") for part in proc.info["cmdline"] or []) \
                    and proc.environ().get("GEOTRAIN_HOME") == home:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _quorum_of(fake, job: str) -> dict | None:
    return (watcher_history.read_state(fake.objects[("configmaps", "default", f"{job}-history")]) or {}).get("quorum")


def _history_of(fake, job: str) -> list[dict]:
    return watcher_history.read_history(fake.objects[("configmaps", "default", f"{job}-history")])


@pytest.mark.parametrize("planted", [
    {"at": 1.0, "kind": "recovery", "cause": "x", "workers": ["w"], "scope": "pod", "attempt": "1", "budget": 3},
    {"at": float("nan"), "kind": "gave_up", "cause": "x", "budget": 1},
    {"at": 1.0, "kind": "exec", "cause": "x"},
    {"at": 1.0, "kind": "recovered", "worker": "w", "downtime_s": True, "step": None, "steps_lost": None},
    "not a mapping",
])
def test_a_history_entry_that_does_not_check_is_left_out(planted):
    good = {"at": 2.0, "kind": "gave_up", "cause": "pod w \x1b[31mfailed\x07", "budget": 1}
    config_map = {"data": {"history.json": json.dumps([planted, good])}}
    assert watcher_history.read_history(config_map) == [
        {"at": 2.0, "kind": "gave_up", "source": "watcher", "cause": "pod w failed ", "budget": 1}]
    assert watcher_history.read_history({"data": {"history.json": "[" * 100_000}}) == []
    assert watcher_history.read_state({"data": {"watcher.json": '{"updated_at": "soon"}'}}) is None


@pytest.mark.parametrize("quorum", [
    {"outer_step": "7", "workers": 2, "datacenters": {"a": 2}},
    {"outer_step": 7, "workers": 2, "datacenters": {"a": True}},
    {"outer_step": 7, "workers": 2, "datacenters": {f"dc{i}": 1 for i in range(65)}},
    {"outer_step": float("inf"), "workers": 2, "datacenters": {}},
    ["not", "a", "mapping"],
])
def test_a_planted_quorum_is_left_out_and_the_rest_of_the_state_shown(quorum):
    state = {"updated_at": 5.0, "used": 0, "budget": 3, "quorum": quorum}
    read = watcher_history.read_state({"data": {"watcher.json": json.dumps(state)}})
    assert read == {"updated_at": 5.0, "used": 0, "budget": 3}
    good = {**state, "quorum": {"outer_step": None, "workers": 1, "datacenters": {"fra\x1b[2J": 1}}}
    shown = watcher_history.describe(watcher_history.read_state({"data": {"watcher.json": json.dumps(good)}}), 9.0)
    assert shown.endswith("; quorum: fra (1 worker)")  # the escape sequence dropped, never sent to a terminal


def test_delete_removes_the_watcher_with_the_workspace(fake, tmp_path):
    cluster = Cluster(name="dc", kind="kubernetes", kubeconfig_path=write_kubeconfig(tmp_path / "kc", fake.url),
                      config={"context": "fake-ctx", "node_groups": [{"vendor": "cpu", "gpus": 0, "nodes": ["a", "b"]}]})
    backend = KubernetesBackend(cluster)
    backend.deploy("ws-d", make_spec(cluster="dc", workers=2), {})
    kinds = {res for res, _, name in fake.objects if "watcher" in name or "history" in name or "store" in name}
    assert kinds == {"configmaps", "serviceaccounts", "roles", "rolebindings", "deployments", "services",
                     "networkpolicies", "secrets"}
    backend.delete("ws-d")
    assert [key for key in fake.objects if key[2].startswith("gt-ws-d")] == []
    deleted = [p for m, p, _ in fake.requests if m == "DELETE"]
    assert deleted.index("/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/gt-ws-d") < \
        deleted.index("/apis/apps/v1/namespaces/default/deployments/gt-ws-d-watcher")  # the job first


def test_the_watcher_refuses_names_that_are_not_kubernetes_names():
    done = subprocess.run([sys.executable, "-m", "recipes.watcher", "--namespace", "default", "--job",
                           "gt-x; rm -rf /", "--history", "h", "--max-recoveries", "1", "--api", "http://127.0.0.1:9"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2 and "is not a Kubernetes name" in done.stderr


def test_a_failed_pod_kept_for_a_look_is_left_where_it_failed(fake, tmp_path):
    """recovery.keep_failed_pods (core/kubernetes/failed_pods.py): the watcher writes it down, deletes nothing."""
    from recipes.watcher import Api, Watcher

    cluster = Cluster(name="dc", kind="kubernetes", kubeconfig_path=write_kubeconfig(tmp_path / "kc", fake.url),
                      config={"context": "fake-ctx", "node_groups": [{"vendor": "cpu", "gpus": 0, "nodes": ["a", "b"]}]})
    fake.replace_deleted_pods = True
    KubernetesBackend(cluster).deploy("ws-k", make_spec(cluster="dc", workers=2), {})
    annotations = fake.objects[("jobs", "default", "gt-ws-k")]["metadata"]["annotations"]
    annotations["geotrain.io/keep-failed-pods"] = "true"  # as core.kubernetes.failed_pods marks the job
    worker = fake.add_pod("gt-ws-k", "worker", 0)
    uid = fake.objects[("pods", "default", worker)]["metadata"]["uid"]
    watcher = Watcher(Api(fake.url), "default", "gt-ws-k", "gt-ws-k-history", 3)
    fake.end_container(worker, 1)
    watcher.poll()
    assert [(e["kind"], e["cause"]) for e in _history_of(fake, "gt-ws-k")] == \
        [("kept", "pod worker-0 failed: Error, exit code 1")]
    assert fake.objects[("pods", "default", worker)]["metadata"]["uid"] == uid
    assert not any(m == "DELETE" for m, _, _ in fake.requests)


def _self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (what a cluster's CA would sign for the API server)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_in_the_pod_it_speaks_https_with_its_token_and_checks_the_servers_certificate(tmp_path, monkeypatch):
    """Api.in_cluster(): the address kubelet puts in the environment, the service account's token and
    CA as kubelet mounts them (SA_DIR pointed at a folder here); a server the CA did not sign is refused."""
    import ssl
    import urllib.error

    import recipes.watcher as watcher_module
    from recipes.watcher import Api, Watcher
    from tests.kubernetes.fake_api_server import FakeKubeAPI

    cert, key = _self_signed(tmp_path, "apiserver")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    api = FakeKubeAPI()
    url = api.start(tls=context)
    try:
        api.objects[("jobs", "default", "gt-t")] = {"metadata": {"name": "gt-t", "uid": "j"},
                                                   "status": {"state": {"phase": "Running"}}}
        api.objects[("configmaps", "default", "gt-t-history")] = {
            "metadata": {"name": "gt-t-history", "resourceVersion": "1", "uid": "c"}, "data": {}}
        account = tmp_path / "serviceaccount"
        account.mkdir()
        (account / "token").write_text("watcher-token-123\n")
        (account / "ca.crt").write_bytes(cert.read_bytes())
        monkeypatch.setattr(watcher_module, "SA_DIR", str(account))
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", url.rsplit(":", 1)[1])
        assert Watcher(Api.in_cluster(), "default", "gt-t", "gt-t-history", 1).poll()
        assert api.authorizations and set(api.authorizations) == {"Bearer watcher-token-123"}
        assert json.loads(api.objects[("configmaps", "default", "gt-t-history")]["data"]["watcher.json"])["budget"] == 1

        other, _ = _self_signed(tmp_path, "impostor")  # a CA that did not sign this server
        (account / "ca.crt").write_bytes(other.read_bytes())
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):  # urllib wraps the SSL error
            Api.in_cluster().call("GET", "/api/v1/namespaces/default/pods")
    finally:
        api.stop()


def test_a_replacement_that_never_shows_a_step_is_written_down_as_running(fake, tmp_path, monkeypatch):
    """Its log cannot tell (no resume event, no step) within TRAINING_WAIT_S: running again, steps unknown."""
    import recipes.watcher as watcher_module
    from recipes.watcher import Api, Watcher

    cluster = Cluster(name="dc", kind="kubernetes", kubeconfig_path=write_kubeconfig(tmp_path / "kc", fake.url),
                      config={"context": "fake-ctx", "node_groups": [{"vendor": "cpu", "gpus": 0, "nodes": ["a", "b"]}]})
    fake.replace_deleted_pods = True
    KubernetesBackend(cluster).deploy("ws-q", make_spec(cluster="dc", workers=2), {})
    worker = fake.add_pod("gt-ws-q", "worker", 0)
    watcher = Watcher(Api(fake.url), "default", "gt-ws-q", "gt-ws-q-history", 3)
    fake.end_container(worker, 1)
    watcher.poll()
    fake.start_container(worker)
    watcher.poll()
    assert [e["kind"] for e in _history_of(fake, "gt-ws-q")] == ["recovery"]  # running, not training yet
    monkeypatch.setattr(watcher_module, "TRAINING_WAIT_S", 0.0)
    watcher.poll()
    recovered = _history_of(fake, "gt-ws-q")[-1]
    assert (recovered["kind"], recovered["step"], recovered["steps_lost"]) == ("recovered", None, None)
