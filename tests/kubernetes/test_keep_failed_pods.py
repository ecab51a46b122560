"""recovery.keep_failed_pods on Kubernetes (issue 43): the Volcano Job keeps no PodFailed policy
(Volcano v1.11.0: an event without a policy is SyncJob, which leaves a Failed pod where it is;
RestartJob would delete it: core/kubernetes/failed_pods.py cites the source), its trainers get
restartPolicy Never, and the recovery check leaves a failed pod alone. The rendered job passes the
vendored Volcano Job schema and Volcano's admission rules; the check runs with the real client
against FakeKubeAPI, the stand-in API server (a real one cannot run here)."""

from __future__ import annotations

from core.backends.kubernetes import KubernetesBackend
from core.domain.records import Cluster
from core.kubernetes.admission import admission_errors
from core.kubernetes.failed_pods import KEEP_ANNOTATION, keep_failed_pods
from core.workspaces import WorkspaceService
from tests.kubernetes.conftest import make_spec, write_kubeconfig

CPU_NODES = [{"vendor": "cpu", "gpus": 0, "nodes": ["n1", "n2"]}]


def _backend(fake, tmp_path) -> KubernetesBackend:
    cluster = Cluster(name="dc", kind="kubernetes", config={"context": "fake-ctx", "node_groups": CPU_NODES},
                      kubeconfig_path=write_kubeconfig(tmp_path / "kubeconfig", fake.url))
    return KubernetesBackend(cluster)


def _policies(job: dict) -> list[dict]:
    return [*job["spec"].get("policies", []), *(p for t in job["spec"]["tasks"] for p in t.get("policies", []))]


def test_the_job_keeps_a_failed_pod_and_passes_volcanos_rules(fake, tmp_path, geotrain_home, job_validator):
    backend = _backend(fake, tmp_path)
    kept = backend._manifests("ws-keep", make_spec(recovery={"keep_failed_pods": True}), {})[-1]
    plain = backend._manifests("ws-plain", make_spec(), {})[-1]
    for job in (kept, plain):
        assert not list(job_validator.iter_errors(job)) and admission_errors(job) == []
    assert not any(p.get("event") == "PodFailed" for p in _policies(kept))
    assert {t["template"]["spec"]["restartPolicy"] for t in kept["spec"]["tasks"]} == {"Never"}
    assert {t["template"]["spec"]["restartPolicy"] for t in plain["spec"]["tasks"]} == {"OnFailure"}
    assert kept["metadata"]["annotations"][KEEP_ANNOTATION] == "true"
    assert KEEP_ANNOTATION not in (plain["metadata"].get("annotations") or {})
    # the other policies stay (a master that completes ends the job; an evicted pod is gone anyway)
    assert [p for p in _policies(plain) if p.get("event") != "PodFailed"] == _policies(kept)


def test_a_policy_naming_pod_failed_among_events_goes_too():
    job = {"metadata": {"name": "j"}, "spec": {
        "policies": [{"events": ["PodFailed", "PodEvicted"], "action": "RestartJob"}],
        "tasks": [{"name": "t", "policies": [{"event": "PodFailed", "action": "RestartPod"},
                                             {"event": "TaskCompleted", "action": "CompleteJob"}],
                   "template": {"spec": {"restartPolicy": "OnFailure"}}}]}}
    keep_failed_pods(job, {"keep_failed_pods": True})
    assert job["spec"]["policies"] == [] and job["spec"]["tasks"][0]["policies"] == [
        {"event": "TaskCompleted", "action": "CompleteJob"}]
    untouched = {"metadata": {"name": "j"}, "spec": {"policies": [{"event": "PodFailed", "action": "RestartJob"}],
                                                     "tasks": []}}
    assert keep_failed_pods(untouched, {})["spec"]["policies"] == [{"event": "PodFailed", "action": "RestartJob"}]


def test_the_recovery_check_leaves_a_kept_failed_pod_where_it_is(fake, tmp_path, geotrain_home):
    backend = _backend(fake, tmp_path)
    spec = make_spec(cluster="dc", recovery={"keep_failed_pods": True, "max_recoveries": 3})
    backend.deploy("ws-keep", spec, {})
    job = fake.jobs()[0]
    uid = job["metadata"].get("uid")
    master, worker = fake.add_pod("gt-ws-keep", "master", 0), fake.add_pod("gt-ws-keep", "worker", 0)
    fake.set_job_phase("gt-ws-keep", "Running")
    fake.end_container(worker, 1, reason="Error", message="CUDA error: an illegal memory access")
    state = backend.status("ws-keep")
    assert backend.recover("ws-keep", spec, state) is None
    assert ("pods", "default", worker) in fake.objects and fake.jobs()[0]["metadata"].get("uid") == uid
    rows = {r.name: r for r in backend.processes("ws-keep")}
    assert rows[worker].state == "Failed" and "exit code 1" in dict(rows[worker].detail)["state"]
