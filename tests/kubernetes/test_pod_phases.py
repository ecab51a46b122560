"""PULLING / PREPARING_DATA / RENDEZVOUS / RUNNING of a Kubernetes workspace, derived from
pod states, kubelet's events and the recipes' event lines, through the real `kubernetes`
client against FakeKubeAPI (a stand-in for an API server, which cannot run here)."""

from __future__ import annotations

import json
import time

from core.backends.kubernetes import KubernetesBackend
from core.domain.records import Cluster
from tests.kubernetes.conftest import make_spec, write_kubeconfig

IMAGE = "docker.io/pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime"
CPU_NODES = [{"vendor": "cpu", "gpus": 0, "nodes": ["n1", "n2"]}]


def event_line(kind: str, **detail) -> bytes:
    return ("geotrain-event " + json.dumps({"kind": kind, "at": time.time(), **detail}) + "\n").encode()


def test_pull_stuck_pull_rendezvous_data_running(fake, tmp_path, geotrain_home):
    cluster = Cluster(name="dc", kind="kubernetes", config={"context": "fake-ctx", "node_groups": CPU_NODES},
                      kubeconfig_path=write_kubeconfig(tmp_path / "kubeconfig", fake.url))
    backend = KubernetesBackend(cluster)
    backend.deploy("ws-st", make_spec(cluster="dc", workers=2), {})
    master = fake.add_pod("gt-ws-st", "master", 0, running=False)
    worker = fake.add_pod("gt-ws-st", "worker", 0, running=False)

    # Kubelet pulls on both nodes; master-0's pull began 90 s ago.
    fake.pull_image(master, "gpu-a", IMAGE, at=time.time() - 90)
    fake.pull_image(worker, "gpu-b", IMAGE)
    state = backend.status("ws-st")
    assert state.status == "PULLING"
    assert f"master-0: pulling {IMAGE} on gpu-a for 1m3" in state.reason  # 1m30s, a second of slack
    assert f"worker-0: pulling {IMAGE} on gpu-b" in state.reason
    assert [w.status for w in state.workers] == ["PULLING", "PULLING"]

    # worker-0's registry refuses: stuck, with the reason and the way forward.
    fake.fail_pull(worker, "ImagePullBackOff", f'Back-off pulling image "{IMAGE}"')
    state = backend.status("ws-st")
    assert state.status == "PULLING"
    assert (f'worker-0: stuck: ImagePullBackOff on gpu-b: Back-off pulling image "{IMAGE}"'
            " — check the image name (--image)") in state.reason

    # master-0 is up and silent (torchrun's rendezvous); worker-0 has its image, not started.
    fake.start_container(master)
    fake.finish_pull(worker, IMAGE)
    state = backend.status("ws-st")
    assert (state.status, state.reason) == ("RENDEZVOUS", "1 of 2 present, waiting for worker-0")

    # master-0 tokenises its shard: PREPARING_DATA with its progress.
    fake.write_log(master, event_line("data", stage="start", source="c4", unit="tokens", rank=0))
    fake.write_log(master, event_line("data", stage="progress", source="c4", unit="tokens",
                                      done=12000, total=40000, rank=0))
    state = backend.status("ws-st")
    assert state.status == "PREPARING_DATA"
    assert state.reason == "master-0: preparing c4: 12,000 of 40,000 tokens (30%)"

    fake.write_log(master, event_line("data", stage="done", source="c4", unit="tokens", done=40000,
                                      seconds=3.2, rank=0))
    fake.write_log(master, event_line("rendezvous", stage="waiting", rank=0, world=2))
    state = backend.status("ws-st")
    assert (state.status, state.reason) == ("RENDEZVOUS", "1 of 2 present, waiting for worker-0")

    fake.start_container(worker)
    fake.set_job_phase("gt-ws-st", "Running")
    fake.write_log(master, b"[rank 0] step 10/20 loss 3.1416 lr 3.00e-03 outer 0 sent 0.000MB 12.5ms/step\n")
    state = backend.status("ws-st")
    assert state.status == "RUNNING" and state.reason == "1 of 2 training; not yet: worker-0"
    fake.write_log(worker, b"[rank 1] step 10/20 loss 3.1416 lr 3.00e-03 outer 0 sent 0.000MB 12.5ms/step\n")
    assert (backend.status("ws-st").status, backend.status("ws-st").reason) == ("RUNNING", "")

    # Pods seen training are not read again on every refresh.
    reads = sum(path.endswith("/log") for _, path, _ in fake.requests)
    backend.status("ws-st")
    assert sum(path.endswith("/log") for _, path, _ in fake.requests) == reads


def test_a_failed_pod_is_named_as_failed_with_why_not_as_still_to_come(fake, tmp_path, geotrain_home):
    """A worker whose container was OOM-killed while the job still runs (Volcano restarts it, or
    the recovery budget is spent): the workspace says which pod failed and why, on one line, and
    the worker's own row says it too; its termination message is the worker's text, shown literally."""
    three = [{"vendor": "cpu", "gpus": 0, "nodes": ["n1", "n2", "n3"]}]
    cluster = Cluster(name="dc", kind="kubernetes", config={"context": "fake-ctx", "node_groups": three},
                      kubeconfig_path=write_kubeconfig(tmp_path / "kubeconfig", fake.url))
    backend = KubernetesBackend(cluster)
    backend.deploy("ws-fl", make_spec(cluster="dc", workers=3), {})
    master = fake.add_pod("gt-ws-fl", "master", 0)
    first = fake.add_pod("gt-ws-fl", "worker", 0)
    second = fake.add_pod("gt-ws-fl", "worker", 1)
    fake.set_job_phase("gt-ws-fl", "Running")
    fake.write_log(master, b"[rank 0] step 10/20 loss 3.1416 lr 3.00e-03 outer 0 sent 0.000MB 12.5ms/step\n")
    fake.end_container(first, 137, reason="OOMKilled")
    state = backend.status("ws-fl")
    assert (state.status, state.reason) == \
        ("RUNNING", "1 of 3 training; not yet: worker-1; failed: worker-0 (OOMKilled, exit code 137)")
    assert [(w.name, w.status, w.detail) for w in state.workers][1] == \
        ("worker-0", "FAILED", "OOMKilled, exit code 137")

    # master-0 goes too: worker-1 has not trained yet, so the workspace waits, and says both failures.
    fake.end_container(master, 1, reason="Error", message="[red]boom[/red]\x1b[2J\nTraceback")
    state = backend.status("ws-fl")
    assert state.status == "RENDEZVOUS"
    assert state.reason == ("1 of 3 present; failed: master-0 (Error, exit code 1: [red]boom[/red] Traceback), "
                            "worker-0 (OOMKilled, exit code 137)")
    # Nobody left: the job's phase (Volcano's; it is restarting the job) stands, the reason is the failures.
    fake.end_container(second, 2, reason="Error")
    state = backend.status("ws-fl")
    assert state.status == "RUNNING" and state.reason.startswith("failed: master-0 (Error, exit code 1: [red]")
    assert state.reason.endswith("worker-1 (Error, exit code 2)") and "\n" not in state.reason
    # Volcano gave up: FAILED, and each worker's row still says why.
    fake.set_job_phase("gt-ws-fl", "Failed")
    state = backend.status("ws-fl")
    assert state.status == "FAILED"
    assert [w.detail for w in state.workers] == ["Error, exit code 1: [red]boom[/red] Traceback",
                                                 "OOMKilled, exit code 137", "Error, exit code 2"]


def _pod(phase: str, terminated: dict | None = None, last: dict | None = None, restarts: int = 0,
         deleting: bool = False, **status) -> dict:
    container = {"name": "trainer", "restartCount": restarts,
                 "state": {"terminated": terminated} if terminated else {"running": {}}}
    if last:
        container["lastState"] = {"terminated": last}
    pod = {"metadata": {"name": "gt-a1-worker-0"}, "status": {"phase": phase, **status}}
    if terminated is not None or last:
        pod["status"]["containerStatuses"] = [container]
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-11-24T16:00:00Z"
    return pod


def test_why_a_pod_failed_in_one_bounded_line():
    from core.kubernetes.pod_phases import MAX_DETAIL, failure, last_restart, pod_phase, worker_detail

    assert failure(_pod("Failed", {"exitCode": 137, "reason": "OOMKilled"})) == "OOMKilled, exit code 137"
    assert failure(_pod("Failed", {"exitCode": 1})) == "Failed, exit code 1"
    assert failure(_pod("Failed")) == "Failed"  # no container status at all
    # an eviction: the pod's own reason first, then how its container stopped
    evicted = _pod("Failed", {"exitCode": 137, "reason": "ContainerStatusUnknown"}, reason="Evicted",
                   message="The node was low on resource: memory.")
    assert failure(evicted) == \
        "Evicted: The node was low on resource: memory. (ContainerStatusUnknown, exit code 137)"
    assert failure(_pod("Failed", reason="DeadlineExceeded")) == "DeadlineExceeded"
    hostile = failure(_pod("Failed", {"exitCode": 2, "message": "[b]x[/b]\x1b[2J\n" + "y" * 5000}))
    assert hostile.startswith("Failed, exit code 2: [b]x[/b] yy") and len(hostile) == MAX_DETAIL  # escape removed
    # a waiting container's or the scheduler's words are one line and capped as well
    waiting = _pod("Pending", {})
    waiting["status"]["containerStatuses"] = [{"name": "trainer", "state": {"waiting": {
        "reason": "CreateContainerConfigError", "message": "secret [red]x[/red]\n\x1b[31m" + "z" * 5000}}}]
    row = worker_detail(waiting)
    assert row.startswith("CreateContainerConfigError secret [red]x[/red] zz") and len(row) == MAX_DETAIL
    unplaced = _pod("Pending", conditions=[{"type": "PodScheduled", "status": "False",
                                             "message": "0/3 nodes are available:\n3 Insufficient gpu."}])
    assert worker_detail(unplaced) == "0/3 nodes are available: 3 Insufficient gpu."
    # a stuck pull keeps its hint after a capped message; a pull's image name is capped; the scheduler's
    # word on the job (its PodGroup) is one line and capped as well
    from core.kubernetes.pod_phases import PULL_HINT, pull_phase, unschedulable_message
    stuck = _pod("Pending", {})
    stuck["status"]["containerStatuses"] = [{"name": "trainer", "state": {"waiting": {
        "reason": "ErrImagePull", "message": "pull access denied\n[b]" + "q" * 5000}}}]
    _, said = pull_phase(stuck, [], 0.0)
    assert said.startswith("stuck: ErrImagePull on its node: pull access denied [b]qq") and said.endswith(PULL_HINT)
    assert len(said) == len("stuck: ErrImagePull on its node: ") + MAX_DETAIL + len(" — ") + len(PULL_HINT)
    pulling = _pod("Pending", {})
    pulling["status"]["containerStatuses"] = [{"name": "trainer", "state": {"waiting": {"reason": "ContainerCreating"}}}]
    _, said = pull_phase(pulling, [{"reason": "Pulling", "message": 'Pulling image "' + "r" * 5000 + '"'}], 0.0)
    assert said == f"pulling {'r' * MAX_DETAIL} on its node"
    job = {"metadata": {"name": "gt-a1", "uid": "u1"}}
    group = {"metadata": {"name": "pg", "ownerReferences": [{"uid": "u1"}]}, "status": {"conditions": [
        {"type": "Unschedulable", "status": "True", "message": "3/3 tasks in gang unschedulable:\n" + "s" * 5000}]}}
    word = unschedulable_message(job, [group])
    assert word.startswith("3/3 tasks in gang unschedulable: sss") and len(word) == MAX_DETAIL
    # restartPolicy OnFailure: kubelet restarts a crashed container in place, the pod stays Running
    restarted = _pod("Running", {}, last={"exitCode": 137, "reason": "OOMKilled"}, restarts=2)
    assert last_restart(restarted) == "OOMKilled, exit code 137"
    assert last_restart(_pod("Running", {})) == ""
    # a pod a job restart is stopping is not named as the failure
    assert pod_phase(_pod("Failed", {"exitCode": 143}, deleting=True), [], None, 0) == \
        ("PENDING", "stopped by a job restart")
    assert pod_phase(_pod("Failed", {"exitCode": 143}), [], None, 0) == ("FAILED", "Failed, exit code 143")


def test_a_restarted_container_says_why_and_the_first_failure_is_the_cause(fake, tmp_path, geotrain_home):
    """A worker OOM-killed and restarted in place shows its restarts and why in its row; recover()
    names the pod that failed first, not the pods a restart already stops."""
    three = [{"vendor": "cpu", "gpus": 0, "nodes": ["n1", "n2", "n3"]}]
    cluster = Cluster(name="dc", kind="kubernetes", config={"context": "fake-ctx", "node_groups": three},
                      kubeconfig_path=write_kubeconfig(tmp_path / "kubeconfig", fake.url))
    backend = KubernetesBackend(cluster)
    spec = make_spec(cluster="dc", workers=3)
    backend.deploy("ws-rs", spec, {})
    master = fake.add_pod("gt-ws-rs", "master", 0)
    first = fake.add_pod("gt-ws-rs", "worker", 0)
    second = fake.add_pod("gt-ws-rs", "worker", 1)
    fake.set_job_phase("gt-ws-rs", "Running")
    fake.restart_container(first, reason="OOMKilled", exit_code=137)
    state = backend.status("ws-rs")
    assert state.workers[1].detail == "started, no training step yet (restarts: 1; last: OOMKilled, exit code 137)"

    fake.end_container(second, 1, reason="Error", finished_at="2026-11-24T10:00:01Z")  # the first to fail
    fake.end_container(master, 137, reason="Error", finished_at="2026-11-24T10:00:05Z")
    fake.end_container(first, 143, reason="Error", finished_at="2026-11-24T09:59:00Z")
    fake.objects[("pods", "default", first)]["metadata"]["deletionTimestamp"] = "2026-11-24T09:59:00Z"
    state = backend.status("ws-rs")
    assert state.reason == "failed: master-0 (Error, exit code 137), worker-1 (Error, exit code 1)"
    assert (state.workers[1].status, state.workers[1].detail) == \
        ("PENDING", "stopped by a job restart (restarts: 1; last: OOMKilled, exit code 137)")
    assert backend.recover("ws-rs", spec, state) is None  # its watcher in the cluster replaces pods
    del fake.objects[("jobs", "default", "gt-ws-rs")]["metadata"]["annotations"]["geotrain.io/watcher"]
    assert backend.recover("ws-rs", spec, state) == "pod worker-1 failed (Error, exit code 1)"  # a job from before it


def test_events_are_listed_per_namespace_by_kind(fake, tmp_path, geotrain_home):
    """The stand-in answers the events list the way the backend asks for it (field selector)."""
    cluster = Cluster(name="dc", kind="kubernetes", config={"context": "fake-ctx", "node_groups": CPU_NODES},
                      kubeconfig_path=write_kubeconfig(tmp_path / "kubeconfig", fake.url))
    backend = KubernetesBackend(cluster)
    fake.objects[("events", "default", "node-event")] = {
        "metadata": {"name": "node-event"}, "reason": "Pulling", "message": "not a pod",
        "involvedObject": {"kind": "Node", "name": "gpu-a"}}
    fake.add_event("some-pod", "Pulling", 'Pulling image "x"')
    events = backend._events()
    assert [e["involvedObject"]["name"] for e in events] == ["some-pod"]
    assert any(q.get("fieldSelector") == "involvedObject.kind=Pod" for _, p, q in fake.requests
               if p.endswith("/events"))


def test_hostile_pod_output_is_read_bounded_and_never_breaks_status(fake, tmp_path, geotrain_home):
    """A pull error with escape sequences, a worker printing a non-finite event and a huge
    line: status() still answers, on one line, and every read is bounded (limit, limitBytes)."""
    cluster = Cluster(name="dc", kind="kubernetes", config={"context": "fake-ctx", "node_groups": CPU_NODES},
                      kubeconfig_path=write_kubeconfig(tmp_path / "kubeconfig", fake.url))
    backend = KubernetesBackend(cluster)
    backend.deploy("ws-hx", make_spec(cluster="dc", workers=2), {})
    master = fake.add_pod("gt-ws-hx", "master", 0, running=False)
    worker = fake.add_pod("gt-ws-hx", "worker", 0, running=False)
    fake.pull_image(worker, "gpu-b", IMAGE)
    fake.fail_pull(worker, "ErrImagePull", "denied\x1b[2J\x1b]0;owned\x07\nfake: line")
    fake.start_container(master)
    fake.write_log(master, b'geotrain-event {"kind": "data", "done": Infinity, "total": 1}\n')
    fake.write_log(master, b"x" * (300 * 1024) + b"\n")
    fake.write_log(master, b'geotrain-event {"kind": "data", "done": 1e308, "total": 1e-308}\n')
    state = backend.status("ws-hx")
    assert state.status == "PULLING"
    assert "denied fake: line" in state.reason  # the escapes removed, the newline a space
    assert not any(ch in state.reason for ch in "\x1b\x07\n")
    assert state.workers[0].status == "RENDEZVOUS"  # started; no readable event
    logs = [q for _, p, q in fake.requests if p.endswith("/log")]
    events = [q for _, p, q in fake.requests if p.endswith("/events")]
    assert logs and all(int(q["limitBytes"]) == 256 * 1024 for q in logs)
    assert events and all(int(q["limit"]) > 0 for q in events)


def test_the_events_list_is_one_bounded_page(fake, tmp_path, geotrain_home, monkeypatch):
    cluster = Cluster(name="dc", kind="kubernetes", config={"context": "fake-ctx", "node_groups": CPU_NODES},
                      kubeconfig_path=write_kubeconfig(tmp_path / "kubeconfig", fake.url))
    monkeypatch.setattr("core.backends.kubernetes.EVENT_LIMIT", 3)
    for i in range(5):
        fake.add_event(f"pod-{i}", "Pulling", 'Pulling image "x"')
    assert len(KubernetesBackend(cluster)._events()) == 3


def test_podgroup_and_master_readers_match_only_their_own_job():
    from core.kubernetes.pod_phases import master_exit_code, unschedulable_message

    job = {"metadata": {"name": "gt-a1", "uid": "u1"}}

    def group(name, owner, status="True", message="0/2 nodes are ready"):
        return {"metadata": {"name": name, "ownerReferences": [{"uid": owner}]},
                "status": {"conditions": [{"type": "Unschedulable", "status": status, "message": message}]}}

    assert unschedulable_message(job, [group("gt-a10-pg", "u2", message="another job's")]) == ""
    assert unschedulable_message(job, [group("pg-x", "u1")]) == "0/2 nodes are ready"  # by owner uid
    assert unschedulable_message(job, [group("gt-a1", "u9", message="by name")]) == "by name"
    assert unschedulable_message(job, [group("pg-x", "u1", status="False")]) == ""

    def pod(name, code=None):
        state = {"terminated": {"exitCode": code}} if code is not None else {"running": {}}
        return {"metadata": {"name": name}, "status": {"containerStatuses": [{"name": "trainer", "state": state}]}}

    assert master_exit_code("gt-a1", [pod("gt-a10-master-0", 3), pod("gt-a1-worker-0", 1)]) is None
    assert master_exit_code("gt-a1", [pod("gt-a1-master-0", 7)]) == 7
    assert master_exit_code("gt-a1", [pod("gt-a1-master-0")]) is None
