"""Recovery on Kubernetes: what the rendered Volcano job carries (checkpoint volume,
retry policies, recovery settings) and the recovery check the app and CLI run, against
FakeKubeAPI — a stand-in for a real Kubernetes API server with Volcano, which cannot run
here; the `kubernetes` client, service, CLI and SQLite above it are the real thing."""

from __future__ import annotations

import pytest

from core.errors import FieldError
from core.kubernetes.manifests import render_volcano_job
from core.domain.records import Cluster, WorkspaceSpec
from core.kubernetes.node_groups import NodeGroup
from core.kubernetes.admission import admission_errors
from core.kubernetes.watcher_manifests import WATCHED_ANNOTATION
from core.workspaces import WorkspaceService
from tests.kubernetes.conftest import fake, job_validator, kubeconfig, make_spec, run  # noqa: F401 (fixtures)

CPU = [NodeGroup("cpu", 0, ("a", "b", "c"))]
RECOVERY = {"max_recoveries": 2, "pvc": "ckpt-claim", "hf_repo": "team/run-ckpts",
            "join_timeout_s": 45, "heartbeat_timeout_s": 4}


def _pods(job: dict) -> list[dict]:
    return [t["template"]["spec"] for t in job["spec"]["tasks"]]


def test_rendered_job_mounts_checkpoints_sets_retries_and_passes_settings(job_validator):
    job = render_volcano_job("ws-ft", make_spec(workers=3, recovery=RECOVERY), Cluster("dc", "geotrain"), CPU)
    assert not list(job_validator.iter_errors(job)) and admission_errors(job) == []
    assert job["spec"]["maxRetry"] == 2
    assert "policies" not in job["spec"]  # no job-wide restart: a lost pod restarts alone
    for pod in _pods(job):
        assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt-claim"}} in pod["volumes"]
        container = pod["containers"][0]
        # a claim the user made: only this workspace's sub-path of it is mounted
        assert {"name": "checkpoints", "mountPath": "/checkpoints", "subPath": "gt-ws-ft"} \
            in container["volumeMounts"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["GEOTRAIN_CHECKPOINT_DIR"] == "/checkpoints"
        assert env["GEOTRAIN_CHECKPOINT_HF_REPO"] == "team/run-ckpts"
        assert env["GEOTRAIN_ELASTIC_JOIN_TIMEOUT_S"] == "45.0"
        assert env["GEOTRAIN_ELASTIC_HEARTBEAT_TIMEOUT_S"] == "4.0"
        assert env["GEOTRAIN_MAX_RECOVERIES"] == "2"

    default = render_volcano_job("ws-d", make_spec(workers=3), Cluster("dc", "geotrain"), CPU)
    assert default["spec"]["maxRetry"] == 3


@pytest.mark.parametrize("recovery, path", [
    ({"max_recoveries": -1}, "recovery.max_recoveries"),
    ({"host_path": "relative/dir"}, "recovery.host_path"),
    ({"pvc": "a", "host_path": "/b"}, "recovery.pvc"),
    ({"join_timeout_s": 0}, "recovery.join_timeout_s"),
    ({"retries": 3}, "recovery.retries"),
])
def test_bad_recovery_settings_name_the_field(recovery, path):
    with pytest.raises(FieldError) as err:
        WorkspaceSpec.from_dict(make_spec(recovery=recovery).to_dict())
    assert err.value.path == path and err.value.hint


def test_a_failed_pod_gets_the_workspace_recovered(fake, kubeconfig, capsys):  # noqa: F811
    code, _, err = run(capsys, "clusters", "add-kubernetes", "mycluster", "--kubeconfig", kubeconfig)
    assert code == 0, err
    spec = WorkspaceSpec(cluster="mycluster", model="gpt-neo", size="tiny", preset="none", workers=2,
                         steps=20, recovery={"max_recoveries": 1, "pvc": "ckpt-claim"},
                         config={"model": "gpt-neo", "size": "tiny", "gradient_compression": "none",
                                 "steps": 20})
    service = WorkspaceService()
    ws = service.deploy(spec, {})
    job = f"gt-{ws.id}"
    first_uid = fake.objects[("jobs", "default", job)]["metadata"]["uid"]
    fake.add_pod(job, "master", 0)
    worker = fake.add_pod(job, "worker", 0)
    fake.set_job_phase(job, "Running")
    assert service.status(ws.id).status == "RENDEZVOUS"  # both started, no training step yet
    assert fake.objects[("jobs", "default", job)]["metadata"]["uid"] == first_uid  # healthy: untouched

    fake.end_container(worker, 137)  # the node went away under it
    service.status(ws.id)  # its watcher in the cluster replaces lost pods: this process only reads
    assert fake.objects[("jobs", "default", job)]["metadata"]["uid"] == first_uid
    assert [r for r in fake.requests if r[0] in ("POST", "DELETE") and "/jobs" in r[1]] == [
        ("POST", "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs", {})]  # the deploy's, nothing since
    # a job deployed by a geotrain from before the watcher (no annotation): recovered from here, as then
    del fake.objects[("jobs", "default", job)]["metadata"]["annotations"][WATCHED_ANNOTATION]
    service.status(ws.id)
    resubmitted = fake.objects[("jobs", "default", job)]
    assert resubmitted["metadata"]["uid"] != first_uid  # a new job on the same checkpoint volume
    assert ("pods", "default", worker) not in fake.objects
    claims = [v for t in _pods(resubmitted) for v in t["volumes"] if "persistentVolumeClaim" in v]
    assert claims and all(v["persistentVolumeClaim"]["claimName"] == "ckpt-claim" for v in claims)
    recoveries = [e for e in service.events(ws.id) if e["kind"] == "recovery"]
    assert len(recoveries) == 1 and recoveries[0]["cause"] == "pod worker-0 failed (Failed, exit code 137)"
    code, out, _ = run(capsys, "workspaces", "show", ws.id)
    assert "recovery: pod worker-0 failed (Failed, exit code 137)" in out and "(workspace, 1 of 1)" in out

    second = fake.add_pod(job, "worker", 0)  # fails again: the budget of one is spent
    fake.end_container(second, 1)
    state = service.status(ws.id)  # the new job's pod failed, and there is no recovery left to try
    assert (state.status, state.reason) == \
        ("PENDING", "failed: worker-0 (Failed, exit code 1); waiting for the Volcano scheduler")
    assert fake.objects[("jobs", "default", job)]["metadata"]["uid"] == resubmitted["metadata"]["uid"]
    assert sum(e["kind"] == "recovery" for e in service.events(ws.id)) == 1
