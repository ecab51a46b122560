"""Elastic DiLoCo pods on Kubernetes (core.kubernetes.elastic_manifests, issue 40): the store's token
Secret, Service and fence, the watcher serving the store, and each pod's real shell giving its
processes their ranks without torchrun.

The pods' own shell runs here as it would in the pod (sh + python); the training program is a
stand-in (a recipes/train.py that prints the ranks it was given), and the store's port a listening
socket of this test: the ranks, not training, are what is checked. Training through the store
across datacenters: tests/faults (40a's datacenter-loss test)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest

from core.backends.kubernetes import KubernetesBackend
from core.bootstrap import versions
from core.domain.records import Cluster
from core.kubernetes import elastic_manifests as elastic
from core.kubernetes.admission import admission_errors
from core.kubernetes.manifests import render_manifests, render_volcano_job
from core.kubernetes.node_groups import NodeGroup
from core.kubernetes.pod_security import pod_specs, violations
from tests.kubernetes.api_validation import policy_problem
from tests.kubernetes.conftest import job_validator, make_spec, write_kubeconfig  # noqa: F401 (fixture)
from tests.kubernetes.conftest import fake, geotrain_home  # noqa: F401 (fixtures)

IMAGE = "registry.example.com/team/recipes:2.0"  # the recipes baked in: the pod's shell installs nothing
K8S = versions.k8s_minor(versions.K3S_VERSION) + ".0"
CLUSTER = Cluster(name="dc", kind="geotrain", config={"pod_security_enforce": "restricted"})
THREE_DCS = [NodeGroup("nvidia", 2, ("fra-a", "fra-b"), "fra"), NodeGroup("nvidia", 1, ("lon-a", "lon-b"), "lon"),
             NodeGroup("cpu", 0, ("sgp-a", "sgp-b", "sgp-c", "sgp-d"), "sgp")]
STAND_IN_TRAIN = ("import os\nos.write(1, ('ranks %s %s %s %s %s\\n' % tuple(os.environ.get(k, '-') for k in "
                  "('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'GEOTRAIN_DATACENTER', 'GEOTRAIN_DC_RANK'))).encode())\n"
                  "code = int(os.environ.get('STAND_IN_FAIL_RANK', '-1') == os.environ['RANK']) * 3\n"
                  "import time; time.sleep(0 if code or 'STAND_IN_FAIL_RANK' not in os.environ else 60)\n"
                  "raise SystemExit(code)\n")


def _by_name(out: list[dict]) -> dict[str, dict]:
    return {f"{m['kind']}/{m['metadata']['name']}": m for m in out}


def _container(task: dict) -> dict:
    return task["template"]["spec"]["containers"][0]


def _events(log: str) -> list[dict]:
    import json

    return [json.loads(line.split(" ", 1)[1]) for line in log.splitlines() if line.startswith("geotrain-event ")]


def _run_pod(task: dict, index: int, stand_in: Path, port: int, **extra: str) -> subprocess.CompletedProcess:
    """The task's pod `index` as its shell runs it: its plain env, Volcano's VC_TASK_INDEX, the store's port here."""
    env = {e["name"]: e["value"] for e in _container(task)["env"] if "value" in e}
    env.update({"PATH": os.environ["PATH"], "PYTHONPATH": str(stand_in), "VC_TASK_INDEX": str(index),
                "GEOTRAIN_RDZV_HOST": "127.0.0.1", "GEOTRAIN_RDZV_PORT": str(port), **extra})
    return subprocess.run(["/bin/sh", "-c", _container(task)["command"][2]], env=env, capture_output=True, text=True, cwd=stand_in,
                          timeout=120)


@pytest.fixture
def stand_in(tmp_path) -> Path:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "__init__.py").write_text("")
    (tmp_path / "recipes" / "train.py").write_text(STAND_IN_TRAIN)
    return tmp_path


@pytest.fixture
def store_port():
    with socket.socket() as listener:  # what the pod's wait step connects to before it starts its processes
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


def test_each_process_of_each_pod_gets_its_own_rank_without_torchrun(stand_in, store_port, job_validator):
    job = render_volcano_job("ws-e", make_spec(workers=6, image=IMAGE), CLUSTER, THREE_DCS)
    assert not list(job_validator.iter_errors(job)) and admission_errors(job) == []
    world = sum(t["replicas"] * int(next(e["value"] for e in _container(t)["env"] if e["name"] == "LOCAL_WORLD_SIZE"))
                for t in job["spec"]["tasks"])
    seen = []
    for task in job["spec"]["tasks"]:
        assert "torchrun" not in _container(task)["command"][2]
        for index in range(task["replicas"]):
            done = _run_pod(task, index, stand_in, store_port)
            assert done.returncode == 0, done.stderr[-2000:]
            seen += [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("ranks ")]
    assert sorted(int(rank) for rank, *_ in seen) == list(range(world))  # every global rank once
    assert {size for _, _, size, _, _ in seen} == {str(world)}
    by_dc: dict[str, list[int]] = {}
    for _, _, _, dc, dc_rank in seen:
        by_dc.setdefault(dc, []).append(int(dc_rank))
    assert all(sorted(ranks) == list(range(len(ranks))) for ranks in by_dc.values()), by_dc  # once inside each


def test_a_failed_process_ends_its_pod_and_stops_its_siblings(stand_in, store_port):
    job = render_volcano_job("ws-e", make_spec(workers=2, image=IMAGE), CLUSTER, [NodeGroup("nvidia", 2, ("a", "b"))])
    task = job["spec"]["tasks"][1]  # the worker pod: global ranks 2 and 3
    done = _run_pod(task, 0, stand_in, store_port, STAND_IN_FAIL_RANK="3")
    assert done.returncode == 3  # kubelet restarts the container (restartPolicy OnFailure)
    assert "worker process" in done.stdout and "stopping this pod's others" in done.stdout
    no_index = _run_pod(task, 0, stand_in, store_port, VC_TASK_INDEX="")
    assert no_index.returncode == 1 and "VC_TASK_INDEX is unset" in no_index.stderr


def test_the_store_objects_pass_upstream_checks_and_the_token_is_a_0400_file():
    spec = make_spec(workers=3, recovery={"storage_class": "fast-rwx"})  # a claim: restricted allows no hostPath
    out = _by_name(render_manifests("ws-e", spec, CLUSTER, THREE_DCS, "team", {}, store_token="t" * 64))
    secret, service, fence = out["Secret/gt-ws-e-store-token"], out["Service/gt-ws-e-watcher"], \
        out["NetworkPolicy/gt-ws-e-watcher"]
    for manifest in (secret, service, fence, out["Deployment/gt-ws-e-watcher"]):
        kubernetes_validate.validate(manifest, K8S, strict=True)
    assert policy_problem(fence) == ""
    assert service["spec"]["selector"] == {"geotrain.io/watcher-of": "ws-e"}
    assert service["spec"]["ports"] == [{"name": "store", "protocol": "TCP", "port": 29401, "targetPort": 29401}]
    deployment = out["Deployment/gt-ws-e-watcher"]["spec"]["template"]
    pods = [{**deployment["spec"], "metadata": deployment["metadata"]}] + \
        [{**pod, "metadata": {}} for _, pod in pod_specs(out["Job/gt-ws-e"])]
    for pod in pods:
        assert violations(pod, "restricted") == []
        (volume,) = [v for v in pod["volumes"] if v["name"] == "store-token"]
        assert volume["secret"] == {"secretName": "gt-ws-e-store-token", "defaultMode": 0o400,
                                    "items": [{"key": "token", "path": "token"}]}
        assert pod["securityContext"]["fsGroup"] == 1000  # kubelet's group read on the 0400 file: the pod user's
        container = pod["containers"][0]
        assert {"name": "store-token", "mountPath": elastic.TOKEN_DIR, "readOnly": True} in container["volumeMounts"]
        assert "t" * 64 not in str(pod)  # a file, never argv or an env value
    command = deployment["spec"]["containers"][0]["command"]
    assert command[command.index("--store-token-file") + 1] == elastic.TOKEN_FILE
    env = {e["name"]: e.get("value") for e in _container(out["Job/gt-ws-e"]["spec"]["tasks"][1])["env"]}
    assert env[elastic.STORE_ENV] == "geotrain-store://gt-ws-e-watcher:29401"
    assert env[elastic.TOKEN_FILE_ENV] == elastic.TOKEN_FILE


@pytest.mark.parametrize("spec", [make_spec(workers=2, preset="none"), make_spec(workers=2, recovery={"elastic": False}),
                                  make_spec(workers=1, size="tiny"),
                                  make_spec(workers=2, template="custom-training", command=["python", "train.py"])])
def test_ddp_static_groups_and_custom_commands_keep_torchrun_and_get_no_store(spec):
    groups = [NodeGroup("cpu", 0, ("a", "b"))]
    out = _by_name(render_manifests("ws-s", spec, CLUSTER, groups, "team", {}))
    assert not [k for k in out if k.endswith("store-token") or k in ("Service/gt-ws-s-watcher",
                                                                     "NetworkPolicy/gt-ws-s-watcher")]
    assert "--store-port" not in out["Deployment/gt-ws-s-watcher"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "torchrun" in _container(out["Job/gt-ws-s"]["spec"]["tasks"][0])["command"][2]


def test_deploy_makes_a_fresh_token_that_only_its_secret_holds(fake, tmp_path, geotrain_home):
    cluster = Cluster(name="dc", kind="kubernetes", kubeconfig_path=write_kubeconfig(tmp_path / "kc", fake.url),
                      config={"context": "fake-ctx", "node_groups": [{"vendor": "cpu", "gpus": 0, "nodes": ["a", "b"]}]})
    backend = KubernetesBackend(cluster)
    plan = backend.plan("ws-t", make_spec(cluster="dc", workers=2)).description
    backend.deploy("ws-t", make_spec(cluster="dc", workers=2), {})
    backend.deploy("ws-u", make_spec(cluster="dc", workers=2), {})
    tokens = [fake.objects[("secrets", "default", f"gt-{ws}-store-token")]["stringData"]["token"] for ws in ("ws-t", "ws-u")]
    assert all(len(t) == 64 and int(t, 16) >= 0 for t in tokens) and tokens[0] != tokens[1]  # 32 random bytes each
    assert "token: <hidden>" in plan and tokens[0] not in plan
    others = [obj for key, obj in fake.objects.items() if key[0] != "secrets"]
    assert tokens[0] not in str(others)  # not in the Job, the Deployment, the ConfigMaps
    assert not any(tokens[0] in str(request) for request in fake.requests if "/secrets" not in request[1])
    for path in geotrain_home.rglob("*"):  # nor in geotrain's own state (SQLite, secret store, logs)
        if path.is_file():
            assert tokens[0].encode() not in path.read_bytes(), path
    backend.delete("ws-t")
    assert [key for key in fake.objects if key[2].startswith("gt-ws-t")] == []


@pytest.mark.slow
@pytest.mark.parametrize("restart", [False, True, "watcher"])
def test_rendered_pods_train_through_the_watchers_store(fake, tmp_path, restart):  # noqa: F811
    """Two pods of two datacenters, as rendered (their shell, env and config), train elastic DiLoCo through
    the store their watcher serves, the watcher run as its Deployment says (the stand-in API server for
    pod state). Adapted for this machine only: the Service's name -> 127.0.0.1 and the port the watcher got,
    /etc/geotrain, /checkpoints and the token's mount -> directories of this test. With "watcher", the watcher
    is killed at outer step 2 and started again on its port with an empty store, as its Deployment would:
    the pods reconnect and train on. With True, the
    second pod's container is killed (SIGKILL, its whole process group) mid-run and started again with the
    same command, as kubelet does under restartPolicy OnFailure: the first trains on without it and it
    rejoins from its live peer."""
    import json
    import sys

    from tests.faults.faults import wait_for

    groups = [NodeGroup("cpu", 0, ("a",), "fra"), NodeGroup("cpu", 0, ("b",), "lon")]
    cluster = Cluster(name="dc", kind="kubernetes", config={})
    steps = 160 if restart else 16
    out = render_manifests("ws-r", make_spec(workers=2, steps=steps, image=IMAGE), cluster, groups, "default", {},
                           store_token="k" * 64)
    by = _by_name(out)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "config.yaml").write_text(by["ConfigMap/gt-ws-r-config"]["data"]["config.yaml"].replace(
        "/workspace/out", str(tmp_path / "out")))
    token = tmp_path / "token"
    token.write_text(by["Secret/gt-ws-r-store-token"]["stringData"]["token"])
    token.chmod(0o400)
    fake.objects[("configmaps", "default", "gt-ws-r-history")] = {
        **by["ConfigMap/gt-ws-r-history"], "metadata": {**by["ConfigMap/gt-ws-r-history"]["metadata"],
                                                        "resourceVersion": "1", "uid": "h"}}
    fake.objects[("jobs", "default", "gt-ws-r")] = {**by["Job/gt-ws-r"], "status": {"state": {"phase": "Running"}}}
    command = by["Deployment/gt-ws-r-watcher"]["spec"]["template"]["spec"]["containers"][0]["command"]
    args = command[command.index("watcher") + 1:]
    args[args.index("--store-port") + 1] = "0"
    args[args.index("--store-token-file") + 1] = str(token)
    args[args.index("--poll-s") + 1] = "0.2"
    repo = Path(__file__).resolve().parents[2]
    def run_watcher():
        return subprocess.Popen([sys.executable, "-m", "recipes.watcher", *args, "--store-host", "127.0.0.1",
                                 "--api", fake.url], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watcher = run_watcher()
    pods = []
    try:
        port = int(watcher.stdout.readline().rsplit(":", 1)[1])
        args[args.index("--store-port") + 1] = str(port)  # a restarted watcher pod keeps its port
        for task in by["Job/gt-ws-r"]["spec"]["tasks"]:
            env = {e["name"]: e["value"] for e in _container(task)["env"] if "value" in e}
            env.update({"PATH": os.environ["PATH"], "PYTHONPATH": str(repo), "VC_TASK_INDEX": "0",
                        "GEOTRAIN_RDZV_HOST": "127.0.0.1", "GEOTRAIN_RDZV_PORT": str(port),
                        elastic.STORE_ENV: f"geotrain-store://127.0.0.1:{port}", elastic.TOKEN_FILE_ENV: str(token),
                        "GEOTRAIN_CHECKPOINT_DIR": str(tmp_path / "ckpt" / task["name"]), "OMP_NUM_THREADS": "1",
                        "WANDB_MODE": "offline", "HOME": str(tmp_path)})
            script = _container(task)["command"][2].replace("/etc/geotrain/config.yaml", str(tmp_path / "etc" / "config.yaml"))
            log = open(tmp_path / f"{task['name']}.log", "a")
            start = lambda: subprocess.Popen(["/bin/sh", "-c", script], env=env, cwd=tmp_path,  # noqa: E731
                                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            pods.append(start())
        if restart == "watcher":  # the watcher's pod dies and its Deployment starts it again, its store empty
            wait_for(lambda: any(e.get("kind") == "outer_step" and e.get("step", 0) >= 2
                                 for e in _events((tmp_path / "master.log").read_text())), 300, "outer step 2", 0.1)
            watcher.kill()
            watcher.wait(30)
            watcher = run_watcher()
        elif restart:  # the second pod's container dies at an outer step, and its restart rejoins
            wait_for(lambda: any(e.get("kind") == "outer_step" and e.get("step", 0) >= 2
                                 for e in _events((tmp_path / "master.log").read_text())), 300, "outer step 2", 0.1)
            os.killpg(pods[1].pid, 9)
            pods[1].wait(30)
            pods[1] = start()
        codes = [p.wait(timeout=600) for p in pods]
        logs = {t["name"]: (tmp_path / f"{t['name']}.log").read_text() for t in by["Job/gt-ws-r"]["spec"]["tasks"]}
        assert codes == [0, 0], {k: v[-3000:] for k, v in logs.items()}
        history = wait_for(lambda: [e for e in json.loads(fake.objects[("configmaps", "default", "gt-ws-r-history")]
                                                          ["data"]["history.json"]) if e["kind"] == "quorum"],
                           60, "the quorum in the watcher's history", 0.1)
    finally:
        for proc in pods + [watcher]:
            if proc.poll() is None:
                proc.kill()
        watcher.wait(30)
    # the watcher saw both datacenters in one quorum, through the store it served to the pods
    assert history[0]["datacenters"] == ["fra", "lon"] and history[0]["workers"] == 2, history
    assert f"step {steps}/{steps}" in logs["master"] and f"step {steps}/{steps}" in logs["dc1"]
    outer = [e["members"] for e in _events(logs["master"]) if e.get("kind") == "outer_step"]
    if not restart:
        assert outer and all(m == [0, 1] for m in outer), outer  # every outer step over both pods, no torchrun
        return
    if restart == "watcher":  # its store came back empty: the pods reconnected and trained on, nothing reloaded
        assert not [e for log in logs.values() for e in _events(log) if e.get("kind") == "resumed"]
        assert outer[-1] == [0, 1], outer
        return
    assert outer[0] == [0, 1] and outer[-1] == [0, 1], outer  # the restarted pod is back in the quorum
    assert any(e.get("kind") == "rejoined" for e in _events(logs["dc1"])), logs["dc1"][-2000:]  # from its live peer
    kinds = [e["kind"] for e in _events(logs["master"])]
    assert "resumed" not in kinds  # rank 0 never reloaded a checkpoint
