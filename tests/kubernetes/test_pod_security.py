"""The rendered pods against Kubernetes Pod Security "baseline" and "restricted".

The checks (core.kubernetes.pod_security) follow upstream, check ID by check ID:
  https://kubernetes.io/docs/concepts/security/pod-security-standards/
  kubernetes/kubernetes staging/src/k8s.io/pod-security-admission/policy/check_*.go
They are tested here on pods that upstream refuses (each must fail the named check), then
used on every pod geotrain renders for every model, size and preset, GPU tasks included.
"""

from __future__ import annotations

import copy
import itertools

import pytest

from core.kubernetes import pod_resources

from core.domain import recipe_catalog
from core.kubernetes.manifests import render_volcano_job
from core.domain.records import Cluster
from core.kubernetes.pod_security import pod_specs, violations
from tests.kubernetes.conftest import HETEROGENEOUS, MODELS, make_spec, presets

# A namespace enforcing "restricted" (as registration records it): the node caches
# (core.kubernetes.recipes_delivery) give way to emptyDirs there.
CLUSTER = Cluster(name="dc", kind="geotrain", config={"pod_security_enforce": "restricted"})
PVC = {"pvc": "geotrain-checkpoints"}


def _sizes(model: str) -> list[str]:
    return recipe_catalog.models().get(model, ["tiny"])


def _good_pod() -> dict:
    job = render_volcano_job("ws-psa", make_spec(workers=7, recovery=PVC), CLUSTER, HETEROGENEOUS)
    return copy.deepcopy(dict(pod_specs(job))["master"])


def _container(pod: dict) -> dict:
    return pod["containers"][0]


# Pods upstream refuses: (what is done to a good pod, the level, the check ID that must fail).
def _host_path(p): p["volumes"].append({"name": "node", "hostPath": {"path": "/"}})
def _privileged(p): _container(p)["securityContext"]["privileged"] = True
def _add_sys_admin(p): _container(p)["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]
def _add_net_raw(p): _container(p)["securityContext"]["capabilities"]["add"] = ["NET_RAW"]
def _add_chown(p): _container(p)["securityContext"]["capabilities"]["add"] = ["CHOWN"]
def _keep_caps(p): _container(p)["securityContext"]["capabilities"] = {}
def _host_network(p): p["hostNetwork"] = True
def _host_pid(p): p["hostPID"] = True
def _host_port(p): _container(p)["ports"][0]["hostPort"] = 29400
def _unconfined(p): _container(p)["securityContext"]["seccompProfile"] = {"type": "Unconfined"}
def _unsafe_sysctl(p): p["securityContext"]["sysctls"] = [{"name": "kernel.msgmax", "value": "1"}]
def _proc_unmasked(p): _container(p)["securityContext"]["procMount"] = "Unmasked"
def _apparmor_off(p): p["metadata"]["annotations"] = {
    "container.apparmor.security.beta.kubernetes.io/trainer": "unconfined"}
def _selinux_user(p): p["securityContext"]["seLinuxOptions"] = {"user": "system_u"}
def _host_process(p): _container(p)["securityContext"]["windowsOptions"] = {"hostProcess": True}
def _probe_host(p): _container(p)["livenessProbe"] = {"tcpSocket": {"host": "10.0.0.1", "port": 80}}
def _nfs(p): p["volumes"].append({"name": "share", "nfs": {"server": "nas", "path": "/x"}})
def _escalation(p): del _container(p)["securityContext"]["allowPrivilegeEscalation"]
def _root(p): _container(p)["securityContext"]["runAsUser"] = 0
def _root_pod(p): p["securityContext"]["runAsUser"] = 0
def _non_root_false(p): _container(p)["securityContext"]["runAsNonRoot"] = False
def _no_seccomp(p):
    del _container(p)["securityContext"]["seccompProfile"]
    del p["securityContext"]["seccompProfile"]
def _no_non_root(p):
    del _container(p)["securityContext"]["runAsNonRoot"]
    del p["securityContext"]["runAsNonRoot"]
def _no_security_context(p):
    del _container(p)["securityContext"]
    del p["securityContext"]
def _bad_init_container(p): p["initContainers"] = [{"name": "setup", "image": "busybox"}]


HOSTILE = [
    (_host_path, "baseline", "hostPathVolumes"), (_privileged, "baseline", "privileged"),
    (_add_sys_admin, "baseline", "capabilities_baseline"), (_add_net_raw, "baseline", "capabilities_baseline"),
    (_host_network, "baseline", "hostNamespaces"), (_host_pid, "baseline", "hostNamespaces"),
    (_host_port, "baseline", "hostPorts"), (_unconfined, "baseline", "seccompProfile_baseline"),
    (_unsafe_sysctl, "baseline", "sysctls"), (_proc_unmasked, "baseline", "procMount"),
    (_apparmor_off, "baseline", "appArmorProfile"), (_selinux_user, "baseline", "seLinuxOptions"),
    (_host_process, "baseline", "windowsHostProcess"), (_probe_host, "baseline", "hostProbesAndhostLifecycle"),
    (_nfs, "restricted", "restrictedVolumes"), (_host_path, "restricted", "restrictedVolumes"),
    (_escalation, "restricted", "allowPrivilegeEscalation"), (_root, "restricted", "runAsUser"),
    (_root_pod, "restricted", "runAsUser"), (_non_root_false, "restricted", "runAsNonRoot"),
    (_no_non_root, "restricted", "runAsNonRoot"), (_no_seccomp, "restricted", "seccompProfile_restricted"),
    (_unconfined, "restricted", "seccompProfile_restricted"), (_keep_caps, "restricted", "capabilities_restricted"),
    (_add_chown, "restricted", "capabilities_restricted"), (_no_security_context, "restricted", "runAsNonRoot"),
    (_no_security_context, "restricted", "allowPrivilegeEscalation"),
    (_bad_init_container, "restricted", "capabilities_restricted"),
]


def test_the_good_pod_passes_both_levels():
    pod = _good_pod()
    assert violations(pod, "baseline") == [] and violations(pod, "restricted") == []


@pytest.mark.parametrize("spoil,level,check", HOSTILE, ids=lambda v: getattr(v, "__name__", v))
def test_the_checker_refuses_what_upstream_refuses(spoil, level, check):
    pod = _good_pod()
    spoil(pod)
    assert any(v.startswith(check + ":") for v in violations(pod, level)), violations(pod, level)


@pytest.mark.parametrize("spoil", [_add_chown, _nfs, _escalation, _root, _no_seccomp, _keep_caps])
def test_restricted_only_rules_leave_baseline_passing(spoil):
    pod = _good_pod()
    spoil(pod)
    assert violations(pod, "baseline") == [] and violations(pod, "restricted") != []


@pytest.mark.parametrize("model,preset", list(itertools.product(MODELS, presets())))
def test_every_rendered_pod_passes_restricted(model, preset):
    """GPU tasks included: nvidia.com/gpu and amd.com/gpu are resources, the nvidia
    RuntimeClass and AMD's supplementalGroups are not restricted fields."""
    for size in _sizes(model):
        spec = make_spec(model=model, size=size, preset=preset, workers=7, recovery=PVC)
        job = render_volcano_job("ws-" + model, spec, CLUSTER, HETEROGENEOUS)
        for task, pod in pod_specs(job):
            assert violations(pod, "restricted") == [], (model, size, task)
            assert pod["automountServiceAccountToken"] is False
            resources = _container(pod)["resources"]
            assert resources["limits"]["memory"] == resources["requests"]["memory"]
            shm = next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]
            assert shm["medium"] == "Memory" and shm["sizeLimit"].endswith("Gi")
            assert int(shm["sizeLimit"][:-2]) < int(resources["limits"]["memory"][:-2])


def test_default_pods_pass_restricted_where_the_cluster_can_give_each_workspace_a_claim():
    """A one-pod job gets its own claim; several pods share a claim of a ReadWriteMany class."""
    for spec, groups in ((make_spec(workers=1), HETEROGENEOUS[:1]),
                         (make_spec(workers=7, recovery={"storage_class": "nfs-rwx"}), HETEROGENEOUS)):
        job = render_volcano_job("ws-default", spec, CLUSTER, groups)
        assert [v for _, pod in pod_specs(job) for v in violations(pod, "restricted")] == []


def test_a_multi_pod_default_without_a_shared_class_fails_only_for_its_node_directory():
    """local-path claims live on one node, so several pods without a ReadWriteMany class keep
    <dir>/<job> on each node, made theirs by a root init step: privileged-only (README)."""
    job = render_volcano_job("ws-many", make_spec(workers=7), CLUSTER, HETEROGENEOUS)
    found = {v.split(":")[0] for _, pod in pod_specs(job) for v in violations(pod, "restricted")}
    assert found == {"hostPathVolumes", "restrictedVolumes", "capabilities_restricted",
                     "runAsNonRoot", "runAsUser"}
    culprits = " ".join(v for _, pod in pod_specs(job) for v in violations(pod, "restricted"))
    assert "checkpoint" in culprits and "nvidia" not in culprits


def test_a_host_path_checkpoint_is_refused_from_baseline_up():
    """recovery.host_path is a user's choice that no Pod Security level but privileged admits."""
    spec = make_spec(workers=2, recovery={"host_path": "/data/ckpt"})
    job = render_volcano_job("ws-hp", spec, CLUSTER, HETEROGENEOUS[:1])
    pod = dict(pod_specs(job))["master"]
    assert any(v.startswith("hostPathVolumes:") for v in violations(pod, "baseline"))
    assert violations(pod, "privileged") == []


def test_memory_grows_with_the_model_and_the_processes_per_pod():
    small = pod_resources.memory_gib(pod_resources.model_params("gpt-neo", "tiny"), 1, "cpu")
    large = pod_resources.memory_gib(pod_resources.model_params("gpt-neo", "1.3b"), 1, "cpu")
    eight = pod_resources.memory_gib(pod_resources.model_params("gpt-neo", "1.3b"), 8, "nvidia")
    assert small < large < eight
    assert large >= 1_315_575_808 * 32 / 2**30  # model, grads, AdamW and DiLoCo state on the host
    assert pod_resources.model_params("no-such-model", "x") == pod_resources.FALLBACK_PARAMS


def test_amd_pods_get_the_device_groups_and_a_cluster_can_change_them():
    job = render_volcano_job("ws-amd", make_spec(workers=2, recovery=PVC), CLUSTER, HETEROGENEOUS[2:3])
    assert all(pod["securityContext"]["supplementalGroups"] == [44, 109] for _, pod in pod_specs(job))
    custom = Cluster(name="dc", kind="geotrain", config={"amd_device_gids": [39, 992],
                                                         "pod_security_enforce": "restricted"})
    job = render_volcano_job("ws-amd", make_spec(workers=2, recovery=PVC), custom, HETEROGENEOUS[2:3])
    pods = [pod for _, pod in pod_specs(job)]
    assert all(p["securityContext"]["supplementalGroups"] == [39, 992] for p in pods)
    assert all(violations(p, "restricted") == [] for p in pods)
