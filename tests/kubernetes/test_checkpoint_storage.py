"""Each workspace's checkpoints on Kubernetes: a volume of its own (a claim, a claim's
sub-path, or its own node directory), never a directory shared with other workspaces, and
the claim's life tied to the workspace — against FakeKubeAPI, a stand-in for a real API
server (which cannot run here), through the real `kubernetes` client."""

from __future__ import annotations

import pytest

from core.backends.base import WorkspaceState
from core.backends.kubernetes import KubernetesBackend
from core.kubernetes.manifests import render_manifests, render_volcano_job
from core.domain.records import Cluster
from core.kubernetes.node_groups import NodeGroup
from core.kubernetes.recovery_manifests import CHECKPOINT_MOUNT, DEFAULT_HOST_PATH, POD_UID
from core.kubernetes.admission import admission_errors
from tests.kubernetes.conftest import make_spec, write_kubeconfig

CPU = [NodeGroup("cpu", 0, ("a", "b", "c"))]
WIZARD, REGISTERED = Cluster("dc", "geotrain"), Cluster("dc", "kubernetes")


def _pods(job: dict) -> list[dict]:
    return [t["template"]["spec"] for t in job["spec"]["tasks"]]


def _volume(job: dict) -> dict:
    (volume,) = {str(v): v for p in _pods(job) for v in p["volumes"] if v["name"] == "checkpoints"}.values()
    return volume


def _claims(manifests: list[dict]) -> list[dict]:
    return [m for m in manifests if m["kind"] == "PersistentVolumeClaim"]


def test_a_one_pod_workspace_gets_its_own_local_path_claim_on_a_wizard_cluster(job_validator):
    out = render_manifests("ws-one", make_spec(workers=1), WIZARD, CPU, "team", {})
    job = out[-1]
    assert not list(job_validator.iter_errors(job)) and admission_errors(job) == []
    (claim,) = _claims(out)
    assert out.index(claim) < out.index(job)  # the claim exists before pods ask for it
    assert claim["metadata"]["name"] == "gt-ws-one-checkpoints" and claim["metadata"]["namespace"] == "team"
    assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-path",
                             "resources": {"requests": {"storage": "50Gi"}}}
    assert _volume(job) == {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "gt-ws-one-checkpoints"}}
    for pod in _pods(job):
        # the provisioner makes the directory 0777 (the node caches' owner step is another's)
        assert [i for i in pod.get("initContainers", []) if i["name"] == "checkpoint-owner"] == []
        assert pod["securityContext"]["fsGroup"] == POD_UID and pod["securityContext"]["runAsUser"] == POD_UID
        assert {"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT} in pod["containers"][0]["volumeMounts"]


def test_a_registered_cluster_uses_its_default_class_or_the_named_one(job_validator):
    (claim,) = _claims(render_manifests("ws-r", make_spec(workers=1), REGISTERED, CPU, "default", {}))
    assert "storageClassName" not in claim["spec"]  # the cluster's default class
    spec = make_spec(workers=3, recovery={"storage_class": "cephfs"})
    out = render_manifests("ws-rwx", spec, REGISTERED, CPU, "default", {})
    (claim,) = _claims(out)
    assert claim["spec"]["storageClassName"] == "cephfs"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # three pods on three nodes share it
    assert not list(job_validator.iter_errors(out[-1]))


def test_a_several_node_job_without_a_shared_class_keeps_a_node_directory_of_its_own(job_validator):
    # local-path volumes live on one node: one claim could not serve pods on three nodes.
    job = render_volcano_job("ws-multi", make_spec(workers=3), WIZARD, CPU)
    assert not list(job_validator.iter_errors(job)) and admission_errors(job) == []
    assert _volume(job)["hostPath"] == {"path": f"{DEFAULT_HOST_PATH}/gt-ws-multi", "type": "DirectoryOrCreate"}
    for pod in _pods(job):
        (init,) = [i for i in pod["initContainers"] if i["name"] == "checkpoint-owner"]
        assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}
        assert init["volumeMounts"] == [{"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT}]


@pytest.mark.parametrize("recovery, expected", [
    ({"host_path": "/srv/geotrain"}, {"hostPath": {"path": "/srv/geotrain/gt-ws-a", "type": "DirectoryOrCreate"}}),
    ({"pvc": "shared-claim"}, {"persistentVolumeClaim": {"claimName": "shared-claim"}}),
])
def test_a_shared_directory_or_claim_is_mounted_only_at_the_workspace_s_own_path(recovery, expected, job_validator):
    jobs = {ws: render_volcano_job(ws, make_spec(workers=2, recovery=recovery), WIZARD, CPU) for ws in ("ws-a", "ws-b")}
    assert not list(job_validator.iter_errors(jobs["ws-a"]))
    assert _volume(jobs["ws-a"]) == {"name": "checkpoints", **expected}
    seen = set()
    for ws, job in jobs.items():
        mounts = [m for p in _pods(job) for m in p["containers"][0]["volumeMounts"] if m["name"] == "checkpoints"]
        volume = _volume(job)
        where = (volume.get("hostPath") or {}).get("path") or mounts[0]["subPath"]
        assert where.endswith(f"gt-{ws}")
        seen.add(where)
        assert not _claims(render_manifests(ws, make_spec(workers=2, recovery=recovery), WIZARD, CPU, "d", {}))
    assert len(seen) == 2  # the two workspaces never see each other's files


@pytest.fixture
def cluster(fake, tmp_path, geotrain_home) -> Cluster:
    return Cluster(name="mycluster", kind="kubernetes",
                   kubeconfig_path=write_kubeconfig(tmp_path / "kubeconfig", fake.url),
                   config={"context": "fake-ctx", "node_groups": [{"vendor": "cpu", "gpus": 0, "nodes": ["n1"]}]})


def test_the_claim_is_created_with_the_job_outlives_a_recovery_and_goes_with_delete(fake, cluster):
    backend = KubernetesBackend(cluster)
    backend.deploy("ws-pvc", make_spec(cluster="mycluster", workers=1), {})
    key = ("persistentvolumeclaims", "default", "gt-ws-pvc-checkpoints")
    claim = fake.objects[key]
    assert claim["status"] == {"phase": "Pending"} and claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    created = [p for m, p, _ in fake.requests if m == "POST"]
    assert created.index("/api/v1/namespaces/default/persistentvolumeclaims") < \
        created.index("/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs")

    pod = fake.add_pod("gt-ws-pvc", "master", 0)
    fake.end_container(pod, 137)
    # resubmitted from here only as a job deployed before the watcher (with one, its watcher replaces the pod)
    del fake.objects[("jobs", "default", "gt-ws-pvc")]["metadata"]["annotations"]["geotrain.io/watcher"]
    assert backend.recover("ws-pvc", make_spec(cluster="mycluster", workers=1), WorkspaceState("RUNNING"))
    assert fake.objects[key]["metadata"]["uid"] == claim["metadata"]["uid"]  # same checkpoints

    backend.delete("ws-pvc")
    assert key not in fake.objects and not [k for k in fake.objects if k[0] == "jobs"]
    backend.delete("ws-pvc")  # twice is fine: everything is already gone


def test_a_failed_deploy_removes_the_claim_it_made(fake, cluster):
    fake.forbidden.add(("POST", "jobs"))
    with pytest.raises(Exception, match="jobs"):
        KubernetesBackend(cluster).deploy("ws-half", make_spec(cluster="mycluster", workers=1), {})
    assert not [k for k in fake.objects if k[0] in ("persistentvolumeclaims", "configmaps")]


def test_the_stand_in_refuses_a_claim_the_real_api_server_would():
    # k8s pkg/apis/core/validation/validation.go ValidatePersistentVolumeClaimSpec
    from tests.kubernetes.api_validation import claim_problem as _claim_problem

    assert "accessModes" in _claim_problem({"spec": {"resources": {"requests": {"storage": "1Gi"}}}})
    assert "storage" in _claim_problem({"spec": {"accessModes": ["ReadWriteOnce"]}})
    assert _claim_problem({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}) == ""


@pytest.mark.parametrize("workers, recovery", [(1, {}), (3, {}), (3, {"pvc": "c"}), (3, {"host_path": "/srv/g"})])
def test_dry_run_yaml_has_no_anchors_from_shared_volume_dicts(workers, recovery):
    from core.kubernetes.manifests import manifests_yaml

    out = render_manifests("ws-y", make_spec(workers=workers, recovery=recovery), WIZARD, CPU, "default", {})
    text = manifests_yaml(out)
    assert "&id" not in text and "*id" not in text
