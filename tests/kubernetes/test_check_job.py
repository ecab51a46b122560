"""The Volcano check job of `clusters check` on a registered Kubernetes cluster (issue 43).

The rendered job passes the vendored Volcano Job schema, Volcano's admission rules and Pod Security
"restricted"; its NetworkPolicy passes the API server's validation as tests/kubernetes/api_validation.py
encodes it. End to end: `clusters check` creates the job through the real `kubernetes` client against
FakeKubeAPI (the stand-in API server: a real one cannot run here). The test plays kubelet: the pods'
logs are the output of two real recipes.cluster_check ranks (torch, gloo) that met in the real
authenticated store with the token read from the Secret the check created."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from core.backends.kubernetes_check import NO_GPU_FACTS
from core.cluster_checks import last_check, run_check
from core.domain.check_modules import MODULES, module_path
from core.domain.records import Cluster
from core.kubernetes.admission import admission_errors
from core.kubernetes.check_job import STORE_PORT, job_name, render_check_job
from core.kubernetes.node_groups import NodeGroup
from core.kubernetes.pod_security import job_violations
from core.state.cluster_records import save_cluster
from core.state.store import Store
from tests.faults.faults import wait_for
from tests.kubernetes.api_validation import policy_problem
from tests.kubernetes.conftest import write_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
GROUPS = [NodeGroup("nvidia", 8, ("gpu-a", "gpu-b")), NodeGroup("cpu", 0, ("cpu-a",))]
TOKEN = "f" * 64


def test_the_check_job_passes_volcanos_schema_admission_and_pod_security(job_validator):
    cluster = Cluster(name="dc", kind="kubernetes", config={"queue": "geotrain"})
    secret, *maps, policy, job = render_check_job(cluster, GROUPS, 2.0, 3283236, TOKEN, "ml")
    assert not list(job_validator.iter_errors(job)) and admission_errors(job) == []
    assert job_violations(job, "restricted") == []
    assert policy_problem(policy) == "" and policy["spec"]["podSelector"] == {"matchLabels": {
        "geotrain.io/check": "geotrain-check-dc"}}
    gpus, cpus = job["spec"]["tasks"]  # a task per node group, a pod per node
    assert (gpus["name"], gpus["replicas"], cpus["name"], cpus["replicas"], job["spec"]["minAvailable"]) == \
        ("check0", 2, "check1", 1, 3)
    pod = gpus["template"]["spec"]
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] \
        == "kubernetes.io/hostname"
    scripts = [t["template"]["spec"]["containers"][0]["command"][2] for t in (gpus, cpus)]
    assert all("--store geotrain-check-dc-check0-0.geotrain-check-dc:29531" in s and "WORLD_SIZE=3" in s
               for s in scripts)
    assert "RANK=$((0 + ${VC_TASK_INDEX" in scripts[0] and "RANK=$((2 + ${VC_TASK_INDEX" in scripts[1]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpu" not in cpus["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert all(subprocess.run(["sh", "-n", "-c", s]).returncode == 0 for s in scripts)  # the shell parses them
    # the token: in the Secret only, read from a file
    assert secret["stringData"] == {"token": TOKEN}
    assert all(TOKEN not in json.dumps(m) for m in (*maps, policy, job))
    assert {v.get("secret", {}).get("secretName") for v in pod["volumes"]} >= {"geotrain-check-dc-token"}
    # the modules the check runs, and nothing else of the recipes
    assert sorted(k.split("-", 1)[1] for m in maps for k in m["data"]) == sorted(
        module_path(n).rsplit("/", 1)[1] for n in MODULES)


def _ranks(token: str, world: int, tmp_path: Path) -> list[str]:
    """Real ranks meeting in the real store, as the job's pods would (loopback instead of the pod IPs)."""
    token_file = tmp_path / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    env = dict(os.environ, WORLD_SIZE=str(world), OMP_NUM_THREADS="1", GEOTRAIN_ELASTIC_STORE_TOKEN_FILE=str(token_file))
    procs = [subprocess.Popen([sys.executable, "-m", "recipes.cluster_check", "--seconds", "0.2", "--payload-bytes",
                               "1000000", "--store", f"127.0.0.1:{STORE_PORT + 7}"]
                              + (["--serve-store", "--store-bind", "127.0.0.1"] if rank == 0 else []),
                              env={**env, "RANK": str(rank)}, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for rank in range(world)]
    return [p.communicate(timeout=300)[0] for p in procs]


def _start_check(fake, tmp_path) -> tuple[Store, str, dict, threading.Thread]:
    """A registered 2-node CPU cluster; `clusters check` running in a thread until its job exists."""
    store = Store()
    config = {"context": "fake-ctx", "node_groups": [{"vendor": "cpu", "gpus": 0, "nodes": ["n1", "n2"]}]}
    save_cluster(store, Cluster(name="dc", kind="kubernetes", config=config,
                                kubeconfig_path=write_kubeconfig(tmp_path / "kubeconfig", fake.url)), create=True)
    job = job_name("dc")
    done: dict = {}
    runner = threading.Thread(target=lambda: done.update(result=run_check(store, "dc", seconds=0.2, size="tiny")))
    runner.start()
    wait_for(lambda: any(j["metadata"]["name"] == job for j in fake.jobs()), 60, "the check job")
    return store, job, done, runner


def test_clusters_check_on_kubernetes_runs_the_job_and_reads_the_pods_lines(fake, tmp_path, geotrain_home):
    store, job, done, runner = _start_check(fake, tmp_path)
    secret = fake.objects[("secrets", "default", f"{job}-token")]
    outputs = _ranks(secret["stringData"]["token"], 2, tmp_path)
    for index, (node, output) in enumerate(zip(("n1", "n2"), outputs)):
        pod = fake.add_pod(job, "check", index)
        fake.objects[("pods", "default", pod)]["spec"] = {"nodeName": node}
        fake.write_log(pod, output.encode())
        fake.end_container(pod, 0)
    runner.join(timeout=120)
    result = done["result"]
    assert result["kind"] == "kubernetes" and result["ok"], result
    assert [n["name"] for n in result["nodes"]] == ["n1", "n2"]
    assert all(n["devices"][0]["device"] == "cpu" and n["devices"][0]["matmul_flops"] > 0 for n in result["nodes"])
    link, = result["links"]
    assert link["kind"] == "job" and link["world"] == 2 and link["busbw"] > 0 and link["bytes"] == 1000000
    assert last_check(store, "dc") == result
    assert result["notes"] == [NO_GPU_FACTS]  # said, not silently missing
    # everything the check made is gone again; the token was in the Secret's body only
    assert not [key for key in fake.objects if job in key[2]]
    assert secret["stringData"]["token"] not in json.dumps(result)


def test_a_pod_without_a_result_names_its_node(fake, tmp_path, geotrain_home):
    store, job, done, runner = _start_check(fake, tmp_path)
    outputs = _ranks(fake.objects[("secrets", "default", f"{job}-token")]["stringData"]["token"], 2, tmp_path)
    good = fake.add_pod(job, "check", 0)
    fake.objects[("pods", "default", good)]["spec"] = {"nodeName": "n1"}
    fake.write_log(good, outputs[0].encode())
    fake.end_container(good, 0)
    bad = fake.add_pod(job, "check", 1)
    fake.objects[("pods", "default", bad)]["spec"] = {"nodeName": "n2"}
    fake.write_log(bad, b"RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    fake.end_container(bad, 1)
    runner.join(timeout=120)
    result = done["result"]
    assert not result["ok"]
    n1, n2 = result["nodes"]
    assert n1["ok"] and not n2["ok"]
    assert n2["why"] == [f"pod {bad} gave no result: RuntimeError: CUDA error: uncorrectable ECC error encountered"]


def test_a_pods_last_words_reach_the_result_without_terminal_escapes():
    """Found in review: a pod's last log line went into the result (and the CLI's output) raw."""
    from core.kubernetes.check_job import results_from_logs

    hostile = "\x1b]0;owned\x07\x1b[2Jno result here\x1b[31m"
    nodes, links = results_from_logs("c", {"gt-check-c-check-0": ("n1", f"starting\n{hostile}\n")}, 1)
    (why,) = nodes[0]["why"]
    assert "\x1b" not in why and "\x07" not in why and "no result here" in why and links == []
