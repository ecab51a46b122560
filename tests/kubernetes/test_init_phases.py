"""INSTALLING_DEPS: a pod whose init steps (cache-owner, install-deps) run or fail says so, with
the failing step's last lines, instead of PENDING "waiting for the Volcano scheduler". The real
`kubernetes` client against FakeKubeAPI (a stand-in for an API server, which cannot run here),
which reports init containers as kubelet does: `status.initContainerStatuses`, the trainer
waiting as PodInitializing, a failed init container run again after a back-off under
restartPolicy OnFailure (Kubernetes docs, "Init Containers":
https://kubernetes.io/docs/concepts/workloads/pods/init-containers/#detailed-behavior)."""

from __future__ import annotations

from core.backends.kubernetes import KubernetesBackend
from core.domain.records import Cluster
from core.kubernetes.pod_phases import failure
from tests.kubernetes.conftest import make_spec, write_kubeconfig

CPU_NODES = [{"vendor": "cpu", "gpus": 0, "nodes": ["n1", "n2"]}]
PIP_ERROR = ("Collecting transformers==4.57.1\n"
             "ERROR: Could not find a version that satisfies the requirement transformers==4.57.1\n"
             "\x1b]0;owned\x07ERROR: No matching distribution found for transformers==4.57.1\x1b[31m\n")


def _backend(fake, tmp_path) -> KubernetesBackend:
    cluster = Cluster(name="dc", kind="kubernetes", config={"context": "fake-ctx", "node_groups": CPU_NODES},
                      kubeconfig_path=write_kubeconfig(tmp_path / "kubeconfig", fake.url))
    backend = KubernetesBackend(cluster)
    backend.deploy("ws-init", make_spec(cluster="dc", workers=2), {})
    return backend


def test_init_steps_running_then_failing_show_with_their_last_lines(fake, tmp_path, geotrain_home):
    backend = _backend(fake, tmp_path)
    master = fake.add_pod("gt-ws-init", "master", 0, running=False)
    worker = fake.add_pod("gt-ws-init", "worker", 0, running=False)
    fake.init_pod(master, "gpu-a")
    fake.init_pod(worker, "gpu-b")
    fake.run_init(master, "cache-owner")
    fake.run_init(worker, "cache-owner")
    state = backend.status("ws-init")
    assert state.status == "INSTALLING_DEPS"
    assert "master-0: preparing the node's cache directories on gpu-a (init 1/2)" in state.reason
    assert "waiting for the Volcano scheduler" not in state.reason

    fake.end_init(master, "cache-owner", 0)
    fake.run_init(master, "install-deps")
    fake.end_init(worker, "cache-owner", 0)
    fake.run_init(worker, "install-deps")
    state = backend.status("ws-init")
    assert state.status == "INSTALLING_DEPS"
    assert state.reason == ("master-0: installing dependencies on gpu-a (init 2/2); "
                            "worker-0: installing dependencies on gpu-b (init 2/2)")

    # master-0's pip fails; kubelet's termination message holds the log's tail (FallbackToLogsOnError)
    fake.end_init(master, "install-deps", 1, output=PIP_ERROR.encode(), message=PIP_ERROR)
    # worker-0's fails with no termination message (a manifest from before): its log is read
    fake.end_init(worker, "install-deps", 1, output=PIP_ERROR.encode())
    state = backend.status("ws-init")
    assert state.status == "INSTALLING_DEPS"
    rows = {w.name: w for w in state.workers}
    for name, node in (("master-0", "gpu-a"), ("worker-0", "gpu-b")):
        assert rows[name].status == "INSTALLING_DEPS"
        assert rows[name].detail.startswith(f"install-deps failed (Error, exit code 1; restarts: 1) — "
                                            f"installing dependencies on {node} (init 2/2): Collecting")
        assert rows[name].detail.endswith("ERROR: No matching distribution found for transformers==4.57.1")
        assert "\x1b" not in rows[name].detail and "\x07" not in rows[name].detail  # printable only
    logs_read = [(path, query) for _, path, query in fake.requests if query.get("container") == "install-deps"]
    assert [path for path, _ in logs_read] == [f"/api/v1/namespaces/default/pods/{worker}/log"]  # only where no message
    assert logs_read[0][1]["previous"] == "true"  # the failed run, not the one waiting to start

def test_a_failed_pod_names_its_failed_init_step():
    # restartPolicy Never (or a pod kubelet gives up on): the pod fails with the trainer never started
    pod = {"status": {"phase": "Failed",
                      "containerStatuses": [{"name": "trainer", "state": {"waiting": {"reason": "PodInitializing"}}}],
                      "initContainerStatuses": [
                          {"name": "cache-owner", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                          {"name": "install-deps", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}}
    assert failure(pod) == "init step install-deps: Error, exit code 1"
