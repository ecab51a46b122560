"""Issue 38.12: what a Kubernetes workspace's delete does with its checkpoints kept in node
directories: removed (over SSH, once its pods are gone) on a cluster geotrain built; said,
with the path, where it stays (a registered cluster's nodes, the user's own claim). Against
FakeKubeAPI, a stand-in for a real API server; the SSH removal itself (core.nodes.node_dirs)
is tested against real sshd hosts in tests/bootstrap/test_node_data_cleanup.py."""

from __future__ import annotations

import pytest

from core.backends import node_files
from core.backends.kubernetes import KubernetesBackend
from core.nodes import node_dirs
from core.domain.records import Cluster
from core.errors import BackendError
from core.workspaces import WorkspaceService
from tests.kubernetes.conftest import make_spec, write_kubeconfig

GROUPS = {"context": "fake-ctx", "node_groups": [{"vendor": "cpu", "gpus": 0, "nodes": ["n1", "n2"]}]}


def _cluster(fake, tmp_path, kind: str) -> Cluster:
    return Cluster(name="dc", kind=kind, nodes=["n1", "n2"] if kind == "geotrain" else [],
                   kubeconfig_path=write_kubeconfig(tmp_path / "kubeconfig", fake.url), config=GROUPS)


class Removals(list):
    """The SSH removal, recorded with the pods still in the API at that moment."""

    def __init__(self, fake):
        super().__init__()
        self.fake = fake

    def __call__(self, nodes, base, job):
        self.append((nodes, base, job, [k for k in self.fake.objects if k[0] == "pods"]))
        return []


@pytest.fixture
def removals(fake):
    return Removals(fake)


def test_a_wizard_cluster_loses_the_directory_once_the_pods_are_gone(fake, tmp_path, geotrain_home,
                                                                      removals):
    backend, spec = KubernetesBackend(_cluster(fake, tmp_path, "geotrain")), make_spec(workers=2)
    backend.deploy("ws-two", spec, {})
    fake.add_pod("gt-ws-two", "master", 0)
    assert backend.kept_after_delete("ws-two", spec) == ""
    backend.delete("ws-two")
    backend.remove_node_files("ws-two", spec, removals)
    assert removals == [(["n1", "n2"], "/var/lib/geotrain/checkpoints", "gt-ws-two", [])]
    spec = make_spec(workers=2, recovery={"host_path": "/srv/ckpt"})
    backend.remove_node_files("ws-two", spec, removals)
    assert removals[-1][1:3] == ("/srv/ckpt", "gt-ws-two")


def test_a_claim_is_not_a_node_directory(fake, tmp_path, geotrain_home, removals):
    backend = KubernetesBackend(_cluster(fake, tmp_path, "geotrain"))
    backend.remove_node_files("ws-one", make_spec(workers=1), removals)  # its own claim: the API's
    spec = make_spec(workers=2, recovery={"pvc": "team-claim"})
    backend.remove_node_files("ws-pvc", spec, removals)
    assert removals == []
    assert backend.kept_after_delete("ws-pvc", spec) == (
        "its checkpoints stay in your claim team-claim, under gt-ws-pvc/ (geotrain does not "
        "delete from a claim it did not make)")


def test_a_registered_cluster_says_where_the_checkpoints_stay(fake, tmp_path, geotrain_home, removals):
    backend, spec = KubernetesBackend(_cluster(fake, tmp_path, "kubernetes")), make_spec(workers=3)
    backend.remove_node_files("ws-reg", spec, removals)
    assert removals == []
    assert backend.kept_after_delete("ws-reg", spec) == (
        "its checkpoints stay in /var/lib/geotrain/checkpoints/gt-ws-reg on each node its pods ran "
        "on (geotrain cannot reach the nodes of a cluster it did not build): remove that directory there")


def test_pods_that_do_not_stop_keep_the_directory_and_say_so(fake, tmp_path, removals):
    cluster = _cluster(fake, tmp_path, "geotrain")
    with pytest.raises(BackendError) as caught:
        node_files.remove(cluster, "ws-slow", "gt-ws-slow", make_spec(workers=2), lambda: True,
                          removals, timeout=0, poll_s=0)
    assert str(caught.value).startswith("the pods of ws-slow are still stopping after 0 s, so its "
                                        "checkpoints stay in /var/lib/geotrain/checkpoints/gt-ws-slow")
    assert removals == [] and "\n" not in str(caught.value)


def test_a_node_left_unreachable_keeps_the_workspace_record(fake, tmp_path, monkeypatch):
    monkeypatch.setattr(node_dirs, "pool_remover", lambda store: lambda *a: ["n2: ssh: no route to host"])
    backend, spec = KubernetesBackend(_cluster(fake, tmp_path, "geotrain")), make_spec(workers=2)
    forgotten = []

    class Service(WorkspaceService):
        def __init__(self):  # the record's fate is what is watched
            self.store = None

        def get(self, workspace_id):
            return type("Ws", (), {"cluster": "dc", "spec": spec})()

        def backend(self, cluster):
            return backend

        def _forget(self, workspace_id):
            forgotten.append(workspace_id)

    with pytest.raises(BackendError, match=r"stay in /var/lib/geotrain/checkpoints/gt-ws-two on 1 "
                                           r"node\(s\) \(n2: ssh: no route to host\)"):
        Service().delete("ws-two")
    assert forgotten == []  # deleting again retries the removal
