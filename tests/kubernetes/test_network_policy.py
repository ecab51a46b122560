"""Issue 38.2: a workspace's rendezvous and store ports admit only its own pods and its watcher.

The rendered NetworkPolicy is checked by `admits`, an evaluator of upstream's semantics
(https://kubernetes.io/docs/concepts/services-networking/network-policies/ and k8s.io/api
networking/v1 types.go): a pod selected by some policy's podSelector whose policyTypes
include Ingress is isolated for ingress; traffic to an isolated pod is allowed iff some
ingress rule of some policy selecting it matches both the peer (podSelector: pods of the
policy's own namespace; namespaceSelector: pods of the namespaces it selects; both: the
pods that match both) and the port (empty ports: every port; empty from: every source).
The backend creates the policy (real `kubernetes` client, FakeKubeAPI stand-in) and deletes
it with the workspace; registration says whether the network plugin enforces it.
"""

from __future__ import annotations

import json

import pytest

from core.backends.kubernetes import KubernetesBackend
from core.domain.records import Cluster
from core.errors import BackendError
from core.kubernetes.manifests import RDZV_PORT, render_manifests
from core.kubernetes.network_policy import (ELASTIC_STORE_PORT, K3S_ARGS, WATCHER_LABEL, network_policy_support,
                                            policy_name)
from core.kubernetes.node_groups import NodeGroup
from core.state.cluster_records import get_cluster, list_clusters
from core.state.store import Store
from tests.kubernetes.api_validation import policy_problem
from tests.kubernetes.conftest import make_spec, run, write_kubeconfig

NCCL_PORT = 43117  # a port NCCL or gloo picks at run time
TWO_DATACENTERS = [NodeGroup("nvidia", 8, ("fra-a", "fra-b"), "fra"), NodeGroup("cpu", 0, ("lon-a",), "lon")]
NAMESPACES = {"team": {"kubernetes.io/metadata.name": "team"}, "other": {"kubernetes.io/metadata.name": "other"}}


# --- upstream semantics ---------------------------------------------------------------------
def selects(selector: dict, labels: dict) -> bool:
    """metav1.LabelSelector: matchLabels and matchExpressions ANDed; an empty selector selects all."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for term in selector.get("matchExpressions") or []:
        key, op, values = term["key"], term["operator"], term.get("values") or []
        if not {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
                "Exists": key in labels, "DoesNotExist": key not in labels}[op]:
            return False
    return True


def policy_types(spec: dict) -> list[str]:
    """types.go: unset policyTypes is Ingress, plus Egress when there are egress rules."""
    return spec.get("policyTypes") or ["Ingress"] + (["Egress"] if spec.get("egress") else [])


def peer_matches(peer: dict, policy_ns: str, src: dict) -> bool:
    assert "ipBlock" not in peer  # geotrain renders none; pod peers only here
    pods, spaces = peer.get("podSelector"), peer.get("namespaceSelector")
    in_namespace = (src["namespace"] == policy_ns if spaces is None
                    else selects(spaces, NAMESPACES[src["namespace"]]))
    return in_namespace and (pods is None or selects(pods, src["labels"]))


def port_matches(item: dict, port: int, protocol: str) -> bool:
    if item.get("protocol", "TCP") != protocol:
        return False
    if item.get("port") is None:
        return True
    assert isinstance(item["port"], int)  # named ports are not modelled (geotrain uses numbers)
    return item["port"] <= port <= item.get("endPort", item["port"])


def admits(policies: list[dict], src: dict, dst: dict, port: int, protocol: str = "TCP") -> bool:
    """Whether `src` may open a connection to `dst` on `port` (traffic from dst's own node aside)."""
    applying = [p for p in policies if p["metadata"]["namespace"] == dst["namespace"]
                and selects(p["spec"]["podSelector"], dst["labels"]) and "Ingress" in policy_types(p["spec"])]
    if not applying:
        return True  # not isolated for ingress
    for policy in applying:
        for rule in policy["spec"].get("ingress") or []:
            peers, ports = rule.get("from") or [], rule.get("ports") or []
            if (not peers or any(peer_matches(p, policy["metadata"]["namespace"], src) for p in peers)) and \
                    (not ports or any(port_matches(item, port, protocol) for item in ports)):
                return True
    return False


def pods_of(job: dict) -> list[dict]:
    """The pods Volcano makes from a Job: each task's template labels plus Volcano's own."""
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    return [{"name": f"{name}-{task['name']}-{i}", "namespace": ns,
             "labels": {**task["template"]["metadata"]["labels"], "volcano.sh/job-name": name,
                        "volcano.sh/task-spec": task["name"]}}
            for task in job["spec"]["tasks"] for i in range(task["replicas"])]


def _render(workspace: str, namespace: str = "team", with_fence: bool = False):
    out = render_manifests(workspace, make_spec(workers=3), Cluster("dc", "geotrain"), TWO_DATACENTERS,
                           namespace, {})
    (policy, fence) = [m for m in out if m["kind"] == "NetworkPolicy"]  # the trainers', the watcher's (its store)
    kinds = [m["kind"] for m in out]
    assert kinds.index("NetworkPolicy") < kinds.index("Deployment") < kinds.index("Job")  # fenced before any pod exists
    assert out.index(fence) < kinds.index("Deployment")  # the watcher too
    assert policy["metadata"]["name"].endswith("-peers") and fence["metadata"]["name"].endswith("-watcher")
    return (policy, fence, out[-1]) if with_fence else (policy, out[-1])


def test_the_evaluator_follows_upstream_on_plain_cases():
    pod = {"namespace": "team", "labels": {"app": "x"}}
    assert admits([], pod, pod, 1)  # no policy selects it: not isolated
    deny_all = {"metadata": {"namespace": "team"}, "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}
    assert not admits([deny_all], pod, pod, 1)
    egress_only = {"metadata": {"namespace": "team"}, "spec": {"podSelector": {}, "policyTypes": ["Egress"]}}
    assert admits([egress_only], pod, pod, 1)
    any_in_other = {"metadata": {"namespace": "team"}, "spec": {"podSelector": {}, "ingress": [
        {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "other"}}}]}]}}
    assert admits([deny_all, any_in_other], {"namespace": "other", "labels": {}}, pod, 1)  # policies add up
    assert not admits([any_in_other], pod, pod, 1)


def test_a_jobs_pods_admit_each_other_and_its_watcher_and_refuse_another_workspace():
    policy, job = _render("ws-a")
    other_policy, other_job = _render("ws-b")
    policies = [policy, other_policy]
    pods, strangers = pods_of(job), pods_of(other_job)
    master = next(p for p in pods if p["name"].endswith("-master-0"))
    assert len({p["labels"]["volcano.sh/task-spec"] for p in pods}) >= 2  # both datacenters' tasks
    for peer in pods:  # the rendezvous, the store, and the ports NCCL/gloo pick
        for target in pods:
            for port in (RDZV_PORT, ELASTIC_STORE_PORT, NCCL_PORT):
                assert admits(policies, peer, target, port), (peer["name"], target["name"], port)
    watcher = {"namespace": "team", "labels": {WATCHER_LABEL: "ws-a"}}
    assert admits(policies, watcher, master, RDZV_PORT) and admits(policies, watcher, master, ELASTIC_STORE_PORT)
    assert not admits(policies, watcher, master, NCCL_PORT)  # the watcher only reaches the stores
    for stranger in strangers:  # another workspace's pods, in the same namespace
        for port in (RDZV_PORT, ELASTIC_STORE_PORT, NCCL_PORT):
            assert not admits(policies, stranger, master, port)
            assert not admits(policies, {"namespace": "team", "labels": {WATCHER_LABEL: "ws-b"}}, master, port)
    elsewhere = {"namespace": "other", "labels": dict(pods[1]["labels"])}  # same labels, another namespace
    assert not admits(policies, elsewhere, master, RDZV_PORT)
    assert not admits(policies, {"namespace": "team", "labels": {}}, master, RDZV_PORT)
    assert not admits(policies, pods[0], strangers[0], RDZV_PORT)  # and the other way round


def test_the_watchers_store_admits_only_its_jobs_pods_on_the_store_port():
    policy, fence, job = _render("ws-a", with_fence=True)
    other_policy, other_fence, other_job = _render("ws-b", with_fence=True)
    assert policy_problem(fence) == ""
    policies = [policy, fence, other_policy, other_fence]
    watcher = {"namespace": "team", "labels": {WATCHER_LABEL: "ws-a", "app.kubernetes.io/managed-by": "geotrain"}}
    for pod in pods_of(job):
        assert admits(policies, pod, watcher, ELASTIC_STORE_PORT)
        assert not admits(policies, pod, watcher, NCCL_PORT) and not admits(policies, pod, watcher, RDZV_PORT)
    for stranger in pods_of(other_job):  # another workspace's trainers, same namespace
        assert not admits(policies, stranger, watcher, ELASTIC_STORE_PORT)
    assert not admits(policies, {"namespace": "team", "labels": {WATCHER_LABEL: "ws-b"}}, watcher, ELASTIC_STORE_PORT)
    assert not admits(policies, {"namespace": "other", "labels": dict(pods_of(job)[0]["labels"])}, watcher,
                      ELASTIC_STORE_PORT)
    assert not admits(policies, {"namespace": "team", "labels": {}}, watcher, ELASTIC_STORE_PORT)


# --- the backend creates it, and deletes it with the workspace --------------------------------
@pytest.fixture
def cluster(fake, tmp_path, geotrain_home) -> Cluster:
    return Cluster(name="mycluster", kind="kubernetes",
                   kubeconfig_path=write_kubeconfig(tmp_path / "kubeconfig", fake.url),
                   config={"context": "fake-ctx", "node_groups": [{"vendor": "cpu", "gpus": 0, "nodes": ["n1", "n2"]}]})


def test_deploy_creates_the_policy_before_the_job_and_delete_removes_it(fake, cluster):
    backend = KubernetesBackend(cluster)
    backend.deploy("ws-a", make_spec(cluster="mycluster", workers=2), {})
    posts = [path for method, path, _ in fake.requests if method == "POST"]
    policy_path = "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies"
    assert posts.index(policy_path) < posts.index("/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs")
    stored = fake.objects[("networkpolicies", "default", policy_name("gt-ws-a"))]
    job = fake.objects[("jobs", "default", "gt-ws-a")]
    stranger = {"namespace": "default", "labels": {"geotrain.io/workspace": "ws-b"}}
    assert all(admits([stored], p, pods_of(job)[0], RDZV_PORT) for p in pods_of(job))
    assert not admits([stored], stranger, pods_of(job)[0], RDZV_PORT)
    backend.delete("ws-a")
    assert not [k for k in fake.objects if k[0] in ("jobs", "networkpolicies")]
    assert ("DELETE", f"{policy_path}/{policy_name('gt-ws-a')}", {}) in fake.requests


def test_a_refused_policy_submits_no_job(fake, cluster):
    fake.forbidden.add(("POST", "networkpolicies"))
    with pytest.raises(BackendError, match="creating NetworkPolicy gt-ws-a-peers on cluster 'mycluster': permission"):
        KubernetesBackend(cluster).deploy("ws-a", make_spec(cluster="mycluster", workers=2), {})
    assert not [k for k in fake.objects if k[0] in ("jobs", "configmaps", "networkpolicies")]


# --- registration: does the network plugin enforce it? ----------------------------------------
def _k3s_server(args: list[str]) -> dict:
    return {"metadata": {"name": "srv", "annotations": {K3S_ARGS: json.dumps(["server", *args])}},
            "status": {"allocatable": {"cpu": "8"}}}


@pytest.mark.parametrize("nodes, daemonsets, enforced", [
    ([_k3s_server(["--node-ip", "10.0.0.1"])], [], True),  # k3s's embedded kube-router controller
    ([_k3s_server(["--disable-network-policy"])], [], False),
    ([_k3s_server(["--disable-network-policy=false"])], [], True),
    # k3s splits --flag=value in two in its node-args annotation (pkg/nodeconfig getNodeArgs), and
    # config-file booleans arrive as --flag=true|false: read the next element as the value
    ([_k3s_server(["--disable-network-policy", "false", "--write-kubeconfig-mode", "0600"])], [], True),
    ([_k3s_server(["--disable-network-policy", "true"])], [], False),
    ([_k3s_server(["--disable-network-policy", "--node-name", "false"])], [], False),
    ([_k3s_server(["--disable-network-policy", "--flannel-backend=none"])], [{"metadata": {"name": "calico-node"}}], True),
    ([], [{"metadata": {"name": "kube-flannel-ds"}}], False),  # flannel alone
    ([], [{"metadata": {"name": "rke2-canal"}}], True),
    ([], [{"metadata": {"name": "cilium"}}, {"metadata": {"name": "cilium-envoy"}}], True),
    ([], [], None), ([], None, None),
])
def test_the_network_plugin_is_read_from_nodes_and_daemonsets(nodes, daemonsets, enforced):
    assert network_policy_support(nodes, daemonsets).enforced is enforced


def _register(capsys, kubeconfig, *extra):
    return run(capsys, "clusters", "add-kubernetes", "mycluster", "--kubeconfig", kubeconfig, *extra)


def test_registering_a_cluster_that_ignores_network_policy_is_refused(fake, kubeconfig, capsys):
    fake.daemonsets = [{"metadata": {"name": "kube-flannel-ds", "namespace": "kube-flannel"}}]
    code, _, err = _register(capsys, kubeconfig)
    assert code == 2 and "cluster 'mycluster' does not enforce NetworkPolicy (flannel alone" in err
    assert "--without-network-policy" in err and err.count("\n") <= 2
    assert [c.name for c in list_clusters(Store())] == ["local"]
    code, out, err = _register(capsys, kubeconfig, "--without-network-policy")
    assert code == 0, err
    assert "warning: NetworkPolicy may not be enforced" in out
    assert get_cluster(Store(), "mycluster").config["network_policy"] == "not enforced"


def test_registering_k3s_says_its_controller_enforces_it(fake, kubeconfig, capsys):
    fake.nodes = [*fake.nodes, _k3s_server(["--tls-san", "k3s.example"])]
    code, out, err = _register(capsys, kubeconfig)
    assert code == 0, err
    assert "Network policy: enforced (k3s's embedded network policy controller (kube-router) runs)" in out
    assert get_cluster(Store(), "mycluster").config["network_policy"] == "enforced"


def test_unreadable_daemonsets_register_with_a_warning(fake, kubeconfig, capsys):
    fake.forbidden.add(("GET", "daemonsets"))
    code, out, err = _register(capsys, kubeconfig)
    assert code == 0, err
    assert "warning: NetworkPolicy may not be enforced on cluster 'mycluster' (the network plugin's " \
           "DaemonSets could not be read)" in out
    assert get_cluster(Store(), "mycluster").config["network_policy"] == "unknown"
