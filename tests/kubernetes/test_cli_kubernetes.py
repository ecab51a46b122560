"""`geotrain clusters add-kubernetes` and `geotrain workspaces …` on a Kubernetes cluster.

The cluster is FakeKubeAPI: a stand-in for a real Kubernetes API server (with Volcano),
which cannot run here, reached by the real `kubernetes` client over HTTP.
"""

from __future__ import annotations

import json

import pytest

from core.state.cluster_records import get_cluster, list_clusters
from core.state.store import Store
from tests.kubernetes.conftest import run


def test_add_kubernetes_records_context_namespace_and_node_groups(fake, kubeconfig, capsys):
    code, out, err = run(capsys, "clusters", "add-kubernetes", "mycluster", "--kubeconfig", kubeconfig,
                         "--context", "fake-ctx")
    assert code == 0, err
    assert "Registered mycluster: 3 nodes (2× nvidia (8 GPUs), 1× cpu)" in out
    cluster = get_cluster(Store(), "mycluster")
    assert cluster.kind == "kubernetes" and cluster.kubeconfig_path == kubeconfig
    assert cluster.config["context"] == "fake-ctx" and cluster.config["namespace"] == "default"
    # no kubernetes.io/arch label on the stand-in's nodes: amd64, as nodes recorded before (issue 41 item 2)
    assert cluster.config["node_groups"] == [{"vendor": "nvidia", "gpus": 8, "nodes": ["gpu-a", "gpu-b"], "arch": "amd64"},
                                             {"vendor": "cpu", "gpus": 0, "nodes": ["cpu-a"], "arch": "amd64"}]
    code, out, _ = run(capsys, "clusters", "list", "--json")
    assert "mycluster" in [c["name"] for c in json.loads(out)]


def test_add_kubernetes_notes_a_missing_queue(fake, kubeconfig, capsys):
    code, out, _ = run(capsys, "clusters", "add-kubernetes", "mycluster", "--kubeconfig", kubeconfig,
                       "--queue", "research")
    assert code == 0 and "queue 'research' was not found" in out


@pytest.mark.parametrize("argv,expected", [
    (["BAD_name"], "cluster name 'BAD_name' is not valid"),
    (["ok", "--context", "nope"], "--context 'nope' is not in"),
    (["ok", "--kubeconfig", "/nonexistent/kc"], "--kubeconfig /nonexistent/kc: no such file"),
])
def test_add_kubernetes_bad_input_changes_nothing(fake, kubeconfig, capsys, argv, expected):
    args = ["clusters", "add-kubernetes", argv[0]] + (argv[1:] if "--kubeconfig" in argv else
                                                      ["--kubeconfig", kubeconfig] + argv[1:])
    code, _, err = run(capsys, *args)
    assert code == 2 and expected in err and err.count("\n") == 1
    assert [c.name for c in list_clusters(Store())] == ["local"]
    assert fake.requests == []


@pytest.mark.parametrize("breakage,expected", [
    ("no-volcano", "is Volcano installed on cluster mycluster?"),
    ("no-node-rights", "listing nodes (geotrain places one worker per node) on cluster 'mycluster': "
                       "permission denied"),
])
def test_add_kubernetes_cluster_problems_are_clear_and_nothing_is_recorded(fake, kubeconfig, capsys,
                                                                           breakage, expected):
    if breakage == "no-volcano":
        fake.volcano_installed = False
    else:
        fake.forbidden.add(("GET", "nodes"))
    code, _, err = run(capsys, "clusters", "add-kubernetes", "mycluster", "--kubeconfig", kubeconfig)
    assert code == 2 and expected in err
    assert [c.name for c in list_clusters(Store())] == ["local"]


def test_add_kubernetes_refuses_a_taken_name_before_contacting_the_cluster(fake, kubeconfig, capsys):
    assert run(capsys, "clusters", "add-kubernetes", "mycluster", "--kubeconfig", kubeconfig)[0] == 0
    before = len(fake.requests)
    code, _, err = run(capsys, "clusters", "add-kubernetes", "mycluster", "--kubeconfig", kubeconfig)
    assert code == 2 and "a cluster named 'mycluster' already exists" in err
    assert len(fake.requests) == before


# Pod Security admission (issue 17.11): a namespace labelled
# pod-security.kubernetes.io/enforce refuses pods below its level, and a Volcano job then
# sits Pending. https://kubernetes.io/docs/concepts/security/pod-security-admission/
def _register(capsys, kubeconfig) -> list[str]:
    code, out, err = run(capsys, "clusters", "add-kubernetes", "mycluster", "--kubeconfig", kubeconfig)
    assert code == 0, err
    return [line for line in out.splitlines() if "Pod Security" in line or "hostPath" in line]


def test_a_restricted_namespace_is_named_and_geotrains_pods_pass_it(fake, kubeconfig, capsys):
    fake.namespaces["default"] = {"pod-security.kubernetes.io/enforce": "restricted",
                                  "pod-security.kubernetes.io/enforce-version": "latest"}
    verdict, note = _register(capsys, kubeconfig)
    assert verdict.startswith("Pod Security: namespace 'default' enforces 'restricted': "
                              "geotrain's pods pass it")
    assert "would be refused" not in verdict
    assert note == ("note: a checkpoint directory on the node (hostPath, e.g. recovery.host_path) is "
                    "refused in this namespace; keep checkpoints on a claim (recovery.pvc).")
    assert ("GET", "/api/v1/namespaces/default", {}) in fake.requests
    assert get_cluster(Store(), "mycluster").config["pod_security_enforce"] == "restricted"


@pytest.mark.parametrize("labels,expected", [
    ({}, "namespace 'default' has no enforce label (the cluster default applies): geotrain's pods are admitted."),
    ({"pod-security.kubernetes.io/enforce": "privileged"}, "enforces 'privileged': geotrain's pods are admitted."),
    ({"pod-security.kubernetes.io/enforce": "baseline"}, "enforces 'baseline': geotrain's pods pass it"),
    ({"pod-security.kubernetes.io/enforce": "Restricted!"}, "enforces 'Restricted!': geotrain's pods pass it"),
])
def test_every_enforce_level_gets_one_line(fake, kubeconfig, capsys, labels, expected):
    fake.namespaces["default"] = labels
    lines = _register(capsys, kubeconfig)
    assert expected in lines[0]
    assert len(lines) == (2 if "pass it" in expected else 1)  # the hostPath note from baseline up


def test_an_unreadable_namespace_still_registers_with_a_line_that_says_so(fake, kubeconfig, capsys):
    fake.forbidden.add(("GET", "namespaces"))
    assert _register(capsys, kubeconfig) == [
        "Pod Security: namespace 'default' could not be read; geotrain's pods pass 'restricted' "
        "with checkpoints on a claim (recovery.pvc)."]
    assert [c.name for c in list_clusters(Store())] == ["local", "mycluster"]
