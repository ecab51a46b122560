"""The Kubernetes backend driving the real `kubernetes` client over HTTP.

The server is FakeKubeAPI: a stand-in for a real Kubernetes API server (with Volcano),
which cannot run here. It keeps state and streams logs in chunks like the real one.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from core.backends.kubernetes import KubernetesBackend
from core.errors import BackendError, InvalidInput
from core.domain.records import Cluster
from core.state.secret_store import SecretStore
from tests.kubernetes.conftest import make_spec, write_kubeconfig

TOKEN = "wandb-token-0123456789"
WANDB_REF, HF_REF = "ws-demo/wandb", "ws-1/hf"  # references into the 0600 secret store
CPU_NODES = [{"vendor": "cpu", "gpus": 0, "nodes": ["n1", "n2", "n3"]}]


@pytest.fixture(autouse=True)
def stored_tokens(geotrain_home):
    """Tokens live in the secret store of a temp GEOTRAIN_HOME; deploy gets references."""
    store = SecretStore()
    store.put(WANDB_REF, TOKEN)
    store.put(HF_REF, TOKEN)


@pytest.fixture
def cluster(fake, tmp_path) -> Cluster:
    return Cluster(name="mycluster", kind="kubernetes",
                   kubeconfig_path=write_kubeconfig(tmp_path / "kubeconfig", fake.url),
                   config={"context": "fake-ctx", "node_groups": CPU_NODES})


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"condition not reached in {timeout} s")


def log_requests(fake):
    return [q for m, p, q in fake.requests if p.endswith("/log")]


def test_deploy_list_status_logs_restart_delete(fake, cluster):
    backend = KubernetesBackend(cluster, log_poll_s=0.1)
    spec = make_spec(cluster="mycluster", workers=2, tokens={"wandb": "ws-demo/wandb"})
    assert backend.deploy("ws-demo", spec, {"WANDB_API_KEY": WANDB_REF}) == "default/gt-ws-demo"

    secret = fake.objects[("secrets", "default", "gt-ws-demo-tokens")]
    assert secret["stringData"] == {"WANDB_API_KEY": TOKEN}
    job = fake.objects[("jobs", "default", "gt-ws-demo")]
    assert TOKEN not in str(job) and TOKEN not in str(fake.objects[("configmaps", "default", "gt-ws-demo-config")])
    assert backend.list() == ["ws-demo"]

    # The gang cannot be placed yet: the scheduler's reason comes from the PodGroup.
    fake.objects[("podgroups", "default", "gt-ws-demo-pg")] = {
        "metadata": {"name": "gt-ws-demo-pg", "ownerReferences": [{"uid": job["metadata"]["uid"]}]},
        "status": {"conditions": [{"type": "Unschedulable", "status": "True",
                                   "message": "2/2 tasks in gang unschedulable: pod group is not ready, 2 minAvailable"}]}}
    state = backend.status("ws-demo")
    assert state.status == "PENDING" and "gang unschedulable: pod group is not ready" in state.reason

    master = fake.add_pod("gt-ws-demo", "master", 0)
    worker = fake.add_pod("gt-ws-demo", "worker", 0)
    fake.set_job_phase("gt-ws-demo", "Running")
    state = backend.status("ws-demo")  # containers started, no training step yet: rendezvous
    assert state.status == "RENDEZVOUS" and state.reason == "all 2 present, forming the group"
    assert [(w.name, w.status) for w in state.workers] == [("master-0", "RENDEZVOUS"), ("worker-0", "RENDEZVOUS")]

    got: list[tuple[str, str]] = []
    follow = backend.logs("ws-demo", follow=True)
    reader = threading.Thread(target=lambda: [got.append(item) for item in follow], daemon=True)
    reader.start()
    wait_for(lambda: len(log_requests(fake)) >= 2)
    # Chunks cut lines (and a UTF-8 character) anywhere; lines must come out whole.
    fake.write_log(master, b"step 1 lo")
    fake.write_log(worker, b"rank 1 ready\nrank 1 st")
    fake.write_log(master, b"ss 2.50\nstep 2 loss 2.")
    fake.write_log(worker, b"ep 1 \xce")
    fake.write_log(master, b"31\n")
    fake.write_log(worker, b"\xbb=0.1\n")
    wait_for(lambda: len(got) >= 4)
    assert [line for who, line in got if who == "master-0"] == ["step 1 loss 2.50", "step 2 loss 2.31"]
    assert [line for who, line in got if who == "worker-0"] == ["rank 1 ready", "rank 1 step 1 λ=0.1"]

    fake.write_log(worker, b"worker crashing\n")
    wait_for(lambda: ("worker-0", "worker crashing") in got)
    fake.restart_container(worker)
    fake.write_log(worker, b"rank 1 rejoined\n")
    wait_for(lambda: ("worker-0", "rank 1 rejoined") in got)
    assert ("worker-0", "── container restarted (restart 1) ──") in got
    assert got.count(("worker-0", "rank 1 ready")) == 1  # no replay of the earlier container

    fake.write_log(master, b"done\n")
    fake.end_container(master, 0)
    fake.end_container(worker, 0)
    fake.set_job_phase("gt-ws-demo", "Completed")
    reader.join(timeout=10)
    assert not reader.is_alive(), "following must stop once the job has finished"
    assert ("master-0", "done") in got

    snapshot = list(backend.logs("ws-demo"))
    assert ("worker-0 (previous)", "worker crashing") in snapshot
    assert ("worker-0", "rank 1 rejoined") in snapshot and ("master-0", "done") in snapshot
    state = backend.status("ws-demo")
    assert (state.status, state.exit_code) == ("COMPLETED", 0)
    assert all("watch" not in q for q in log_requests(fake)), "log calls must not send watch"

    backend.delete("ws-demo")
    assert not [k for k in fake.objects if k[0] in ("jobs", "secrets", "configmaps", "pods")]
    backend.delete("ws-demo")  # idempotent
    assert backend.status("ws-demo").status == "DELETED"
    assert backend.list() == []


def test_following_reopens_a_timed_out_stream_without_repeating_lines(fake, cluster):
    backend = KubernetesBackend(cluster, log_poll_s=0.1, log_read_timeout_s=0.5)
    backend.deploy("ws-quiet", make_spec(cluster="mycluster", workers=1), {})
    pod = fake.add_pod("gt-ws-quiet", "master", 0)
    fake.set_job_phase("gt-ws-quiet", "Running")
    got: list = []
    follow = backend.logs("ws-quiet", follow=True)
    reader = threading.Thread(target=lambda: [got.append(item) for item in follow], daemon=True)
    reader.start()
    fake.write_log(pod, b"first\n")
    wait_for(lambda: len(got) == 1)
    time.sleep(1.5)  # silence longer than the read timeout: the stream is reopened
    fake.write_log(pod, b"second\n")
    wait_for(lambda: len(got) == 2)
    fake.end_container(pod, 0)
    fake.set_job_phase("gt-ws-quiet", "Completed")
    reader.join(timeout=10)
    assert got == [("master-0", "first"), ("master-0", "second")]
    reopened = [q for q in log_requests(fake) if "sinceSeconds" in q]
    assert reopened and all(q["timestamps"] == "true" for q in reopened)


def test_following_shows_a_crashed_container_first_and_a_recreated_pod_after(fake, cluster):
    backend = KubernetesBackend(cluster, log_poll_s=0.1)
    backend.deploy("ws-rj", make_spec(cluster="mycluster", workers=1), {})
    pod = fake.add_pod("gt-ws-rj", "master", 0)
    fake.write_log(pod, b"Traceback: CUDA error\n")
    fake.restart_container(pod)  # crashed before anyone followed it
    fake.write_log(pod, b"resumed from checkpoint at step 100\n")
    fake.set_job_phase("gt-ws-rj", "Running")
    got: list = []
    follow = backend.logs("ws-rj", follow=True)
    reader = threading.Thread(target=lambda: [got.append(item) for item in follow], daemon=True)
    reader.start()
    wait_for(lambda: len(got) == 2)
    assert got == [("master-0 (previous)", "Traceback: CUDA error"),
                   ("master-0", "resumed from checkpoint at step 100")]
    fake.set_job_phase("gt-ws-rj", "Restarting")
    fake.recreate_pod(pod)  # PodFailed -> RestartJob: same name, new uid
    fake.set_job_phase("gt-ws-rj", "Running")
    fake.write_log(pod, b"step 1 again\n")
    wait_for(lambda: ("master-0", "step 1 again") in got)
    fake.end_container(pod, 0)
    fake.set_job_phase("gt-ws-rj", "Completed")
    reader.join(timeout=10)
    assert got[2:] == [("master-0", "── pod recreated ──"), ("master-0", "step 1 again")]


@pytest.mark.parametrize("phase,expected", [("Pending", "PENDING"), ("Restarting", "RUNNING"),
                                            ("Completed", "COMPLETED"), ("Failed", "FAILED"),
                                            ("Aborted", "FAILED"), ("Terminated", "FAILED")])
def test_volcano_job_phases_map_to_workspace_status(fake, cluster, phase, expected):
    backend = KubernetesBackend(cluster)
    backend.deploy("ws-ph", make_spec(cluster="mycluster", workers=1), {})
    fake.set_job_phase("gt-ws-ph", phase)
    assert backend.status("ws-ph").status == expected


def test_pending_reason_falls_back_to_the_pods_scheduling_message(fake, cluster):
    backend = KubernetesBackend(cluster)
    backend.deploy("ws-pr", make_spec(cluster="mycluster", workers=1), {})
    fake.forbidden.add(("GET", "podgroups"))  # no rights on PodGroups: the pod still tells
    fake.add_pod("gt-ws-pr", "master", 0, running=False,
                 scheduled_message="0/3 nodes are unavailable: 3 Insufficient nvidia.com/gpu; "
                                   "gang unschedulable: pod group is not ready")
    state = backend.status("ws-pr")
    assert state.status == "PENDING" and state.reason.startswith("0/3 nodes are unavailable")
    assert state.workers[0].status == "PENDING" and "Insufficient" in state.workers[0].detail


def test_api_unreachable_is_a_clear_error(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    cluster = Cluster(name="far", kind="kubernetes",
                      kubeconfig_path=write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}"),
                      config={"context": "fake-ctx", "node_groups": CPU_NODES})
    started = time.monotonic()
    with pytest.raises(BackendError) as info:
        KubernetesBackend(cluster).deploy("ws-1", make_spec(cluster="far"), {})
    assert "cannot reach the Kubernetes API of cluster 'far'" in info.value.message
    assert "kubeconfig" in info.value.hint
    assert time.monotonic() - started < 10


def test_missing_volcano_crd_is_named_and_nothing_is_created(fake, cluster):
    fake.volcano_installed = False
    with pytest.raises(BackendError, match=r"is Volcano installed on cluster mycluster\?"):
        KubernetesBackend(cluster).deploy("ws-1", make_spec(cluster="mycluster"), {"HF_TOKEN": HF_REF})
    assert fake.objects == {}
    with pytest.raises(BackendError, match="is Volcano installed"):
        KubernetesBackend(cluster).list()


def test_duplicate_name_gives_409_message_and_keeps_the_running_workspace(fake, cluster):
    backend = KubernetesBackend(cluster)
    backend.deploy("ws-1", make_spec(cluster="mycluster"), {"HF_TOKEN": HF_REF})
    before = dict(fake.objects)
    with pytest.raises(BackendError) as info:
        backend.deploy("ws-1", make_spec(cluster="mycluster"), {"HF_TOKEN": HF_REF})
    assert "already exists" in info.value.message and "delete the existing workspace" in info.value.hint
    assert fake.objects == before


def test_job_name_taken_by_someone_else_rolls_back_secret_and_config(fake, cluster):
    fake.objects[("jobs", "default", "gt-ws-1")] = {"metadata": {"name": "gt-ws-1"}}
    with pytest.raises(BackendError, match="creating Job gt-ws-1 on cluster 'mycluster': already exists"):
        KubernetesBackend(cluster).deploy("ws-1", make_spec(cluster="mycluster"), {"HF_TOKEN": HF_REF})
    assert list(fake.objects) == [("jobs", "default", "gt-ws-1")]


def test_missing_rights_give_403_message_and_nothing_is_left(fake, cluster):
    fake.forbidden.add(("POST", "jobs"))
    with pytest.raises(BackendError) as info:
        KubernetesBackend(cluster).deploy("ws-1", make_spec(cluster="mycluster"), {"HF_TOKEN": HF_REF})
    assert "permission denied" in info.value.message and 'cannot create resource "jobs"' in info.value.message
    assert "RBAC" in info.value.hint and "'default'" in info.value.hint
    assert fake.objects == {}


@pytest.mark.parametrize("change,expected", [
    (dict(kubeconfig_path=None), "has no kubeconfig"),
    (dict(image="Not A/valid:image"), "not a valid container image name"),
    (dict(workers=4), "4 workers asked, but cluster 'mycluster' has 3 schedulable nodes"),
])
def test_bad_input_submits_nothing(fake, cluster, change, expected):
    if "kubeconfig_path" in change:
        cluster.kubeconfig_path = None
    spec = make_spec(cluster="mycluster", **{k: v for k, v in change.items() if k != "kubeconfig_path"})
    with pytest.raises(InvalidInput, match=expected):
        KubernetesBackend(cluster).deploy("ws-1", spec, {"HF_TOKEN": HF_REF})
    assert fake.requests == [] and fake.objects == {}


def test_a_token_missing_from_the_secret_store_submits_nothing(fake, cluster):
    with pytest.raises(InvalidInput, match=r"token for HF_TOKEN \(ws-9/hf\) is not in the secret store"):
        KubernetesBackend(cluster).deploy("ws-9", make_spec(cluster="mycluster"), {"HF_TOKEN": "ws-9/hf"})
    assert fake.requests == []


def _trainer_env(fake, job: str) -> list[dict]:
    return [c["env"] for t in fake.objects[("jobs", "default", job)]["spec"]["tasks"]
            for c in t["template"]["spec"]["containers"]]


def test_pods_log_to_the_w_and_b_server_this_machine_names(fake, cluster, monkeypatch):
    """The key is checked at this machine's WANDB_BASE_URL (core.requirements.wandb_key); pods of a
    workspace that logs to W&B are given the same server, as a plain value."""
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.corp.example:8443/")
    KubernetesBackend(cluster).deploy("ws-w", make_spec(cluster="mycluster", workers=2, tokens={"wandb": WANDB_REF}),
                                      {"WANDB_API_KEY": WANDB_REF})
    envs = _trainer_env(fake, "gt-ws-w")
    assert len(envs) == 2 and all({"name": "WANDB_BASE_URL", "value": "https://wandb.corp.example:8443"} in e
                                  for e in envs)
    KubernetesBackend(cluster).deploy("ws-h", make_spec(cluster="mycluster", workers=2, tokens={"hf": HF_REF}),
                                      {"HF_TOKEN": HF_REF})  # no W&B: nothing about its server
    assert not any(v["name"] == "WANDB_BASE_URL" for e in _trainer_env(fake, "gt-ws-h") for v in e)


def _without_watcher(fake, job: str) -> None:
    """The job as a geotrain from before the watcher deployed it: recovered by the process that refreshes."""
    from core.kubernetes.watcher_manifests import WATCHED_ANNOTATION

    del fake.objects[("jobs", "default", job)]["metadata"]["annotations"][WATCHED_ANNOTATION]


def test_a_recovered_job_logs_where_the_first_one_did(fake, cluster, monkeypatch):
    """recover() runs in whichever process refreshes (the app, `workspaces list` in another shell): the
    new Job keeps the deployed WANDB_BASE_URL, not that process's, and a bad one there does not stop it."""
    from core.backends.base import WorkspaceState

    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.corp.example")
    backend = KubernetesBackend(cluster)
    spec = make_spec(cluster="mycluster", workers=2, tokens={"wandb": WANDB_REF})
    backend.deploy("ws-w", spec, {"WANDB_API_KEY": WANDB_REF})
    assert backend.recover("ws-w", spec, WorkspaceState("RUNNING")) is None  # its watcher's job, not ours
    _without_watcher(fake, "gt-ws-w")
    fake.set_job_phase("gt-ws-w", "Failed")
    monkeypatch.setenv("WANDB_BASE_URL", "https://api:sekrit@elsewhere.example")
    assert backend.recover("ws-w", spec, WorkspaceState("RUNNING")) == "Volcano job failed after its own retries"
    assert all({"name": "WANDB_BASE_URL", "value": "https://wandb.corp.example"} in e
               for e in _trainer_env(fake, "gt-ws-w"))

    job = fake.objects[("jobs", "default", "gt-ws-w")]  # edited in the cluster: left out, not copied
    for task in job["spec"]["tasks"]:
        for env in task["template"]["spec"]["containers"][0]["env"]:
            if env["name"] == "WANDB_BASE_URL":
                env["value"] = "https://x.example\n- name: LD_PRELOAD"
    _without_watcher(fake, "gt-ws-w")
    fake.set_job_phase("gt-ws-w", "Failed")
    monkeypatch.setenv("WANDB_BASE_URL", "https://elsewhere.example")  # a plain one here is not taken either
    assert backend.recover("ws-w", spec, WorkspaceState("RUNNING"))
    assert not any(v["name"] == "WANDB_BASE_URL" for e in _trainer_env(fake, "gt-ws-w") for v in e)


@pytest.mark.parametrize("job", [{}, {"spec": None}, {"spec": {"tasks": "x"}}, {"spec": {"tasks": [None]}},
                                 {"spec": {"tasks": [{"template": {"spec": {"containers": [{"env": [None]}]}}}]}},
                                 {"spec": {"tasks": [{"template": {"spec": {"containers": [
                                     {"env": [{"name": "WANDB_BASE_URL", "value": ["https://a.example"]}]}]}}}]}}])
def test_a_job_not_of_geotrains_shape_gives_no_settings(job):
    from core.kubernetes.manifests import deployed_settings

    assert deployed_settings(job) == {}


@pytest.mark.parametrize("url", ["https://api:sekrit@wandb.example", "wandb.example", "ftp://wandb.example",
                                 "https://wandb.example/x?token=1", "https://wandb.example\n- name: X",
                                 "https://wandb.example:99999", "HTTPS://wandb.example",
                                 "https://wandb.example/" + "a" * 600])
def test_a_w_and_b_server_that_is_not_a_plain_address_submits_nothing(fake, cluster, monkeypatch, url):
    monkeypatch.setenv("WANDB_BASE_URL", url)
    with pytest.raises(InvalidInput, match="WANDB_BASE_URL is not an http.s. address") as info:
        KubernetesBackend(cluster).deploy("ws-w", make_spec(cluster="mycluster", tokens={"wandb": WANDB_REF}),
                                          {"WANDB_API_KEY": WANDB_REF})
    assert "sekrit" not in str(info.value) and "\n" not in str(info.value)
    assert "unset it" in info.value.hint
    assert fake.requests == [] and fake.objects == {}


def test_plan_shows_manifests_without_contacting_the_cluster(fake, cluster, monkeypatch):
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    plan = KubernetesBackend(cluster).plan("ws-1", make_spec(cluster="mycluster", tokens={"wandb": "ws-1/wandb"}))
    assert "kind: Job" in plan.description and "kind: Secret" in plan.description
    assert "WANDB_API_KEY: <hidden>" in plan.description
    assert "WANDB_BASE_URL" not in plan.description  # not set here: the image's wandb default
    assert "model: gpt-neo" in plan.config_yaml
    assert fake.requests == []


def test_metrics_come_from_the_pod_that_holds_rank_0_even_when_it_is_a_worker(fake, cluster):
    """c10d rendezvous put rank 0 on worker-0 (issue 17.5): master-0 prints rank 1's lines."""
    backend = KubernetesBackend(cluster)
    backend.deploy("ws-r0", make_spec(cluster="mycluster", workers=2), {})
    master, worker = fake.add_pod("gt-ws-r0", "master", 0), fake.add_pod("gt-ws-r0", "worker", 0)
    fake.set_job_phase("gt-ws-r0", "Running")
    fake.write_log(master, b"[rank 1] step 10/20 loss 9.9999 lr 3.00e-03 outer 0 sent 0.125MB 50.0ms/step\n")
    fake.write_log(worker, b"[rank 0] step 10/20 loss 3.1416 lr 3.00e-03 outer 0 sent 0.125MB 12.5ms/step\n"
                           b"[rank 0] step 20/20 loss 2.7182 lr 3.00e-03 outer 1 sent 0.125MB 12.5ms/step\n")
    assert [(r["step"], r["loss"]) for r in backend.metrics("ws-r0")] == [(10, 3.1416), (20, 2.7182)]
    before = len(log_requests(fake))
    assert len(backend.metrics("ws-r0")) == 2
    assert [p for m, p, q in fake.requests if p.endswith("/log")][before:] == \
        [f"/api/v1/namespaces/default/pods/{worker}/log"]  # the rank-0 pod, remembered, read alone


def test_metrics_before_any_progress_line_are_empty_and_read_every_pod(fake, cluster):
    backend = KubernetesBackend(cluster)
    backend.deploy("ws-r0", make_spec(cluster="mycluster", workers=2), {})
    fake.add_pod("gt-ws-r0", "master", 0)
    fake.add_pod("gt-ws-r0", "worker", 0, running=False)  # still pulling its image
    assert backend.metrics("ws-r0") == []
    assert len(log_requests(fake)) == 2


def test_deploy_refuses_pods_the_namespace_pod_security_level_would_refuse(fake, cluster):
    """Issue 17.11: without this the job is created and sits Pending with no reason shown."""
    cluster.config["pod_security_enforce"] = "baseline"  # as registration records it
    backend = KubernetesBackend(cluster)
    spec = make_spec(cluster="mycluster", workers=2, recovery={"host_path": "/data/ckpt"})
    with pytest.raises(InvalidInput) as info:
        backend.deploy("ws-hp", spec, {})
    assert "enforces Pod Security 'baseline'" in info.value.message
    assert "hostPathVolumes" in info.value.message and "recovery.pvc" in info.value.hint
    assert fake.objects == {}
    cluster.config["pod_security_enforce"] = "restricted"
    ok = make_spec(cluster="mycluster", workers=2, recovery={"pvc": "team-ckpt"})
    assert KubernetesBackend(cluster).deploy("ws-ok", ok, {}) == "default/gt-ws-ok"
