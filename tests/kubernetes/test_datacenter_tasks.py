"""One Volcano task per datacenter: schema, admission, zone affinity, and what each pod is told."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from core.backends.kubernetes import KubernetesBackend
from core.domain.datacenters import ZONE_LABEL
from core.domain.records import Cluster
from core.errors import InvalidInput
from core.kubernetes.admission import admission_errors
from core.kubernetes.manifests import render_volcano_job
from core.kubernetes.node_groups import NodeGroup, groups_from_kubernetes
from core.kubernetes.pod_security import pod_specs, violations
from core.state.cluster_records import get_cluster
from core.state.store import Store
from tests.kubernetes.conftest import make_spec, run

CLUSTER = Cluster(name="dc", kind="geotrain")

# Three datacenters, mixed GPUs: fra has NVIDIA H100s (8 per node) and AMD MI300s, lon one
# kind of NVIDIA box with 1 GPU, sgp CPUs only.
THREE_DCS = [
    NodeGroup("nvidia", 8, ("fra-h100-a", "fra-h100-b"), "fra"),
    NodeGroup("nvidia", 1, ("lon-l4-a", "lon-l4-b", "lon-l4-c"), "lon"),
    NodeGroup("amd", 8, ("fra-mi300-a",), "fra"),
    NodeGroup("cpu", 0, ("sgp-cpu-a", "sgp-cpu-b"), "sgp.1"),
]


def _container(task):
    return task["template"]["spec"]["containers"][0]


def _env(task):
    return {e["name"]: e.get("value") for e in _container(task)["env"]}


def _dc_rank(task, index: int) -> int:
    """The rank the pod's shell computes, run for real with the index Volcano gives the pod."""
    env = _env(task)
    if "GEOTRAIN_DC_RANK" in env:
        return int(env["GEOTRAIN_DC_RANK"])
    script = _container(task)["command"][2]
    prelude = script[:script.index("py=$(")]  # the rank lines come before the rendezvous wait
    out = subprocess.run(["/bin/sh", "-c", prelude + 'echo "$GEOTRAIN_DC_RANK"'], check=True,
                         capture_output=True, text=True, env={"VC_TASK_INDEX": str(index)})
    return int(out.stdout)


def _process_ranks(task, first: int, slots: int) -> list[int]:
    """The rank each of the pod's processes sees: torchrun --no-python starts the command after
    it with LOCAL_RANK set; here it is started the same way, python swapped for a shell."""
    exec_line = _container(task)["command"][2].splitlines()[-1]
    argv = shlex.split(exec_line)
    if "--no-python" not in argv:
        assert slots == 1
        return [first]
    wrapper = argv[argv.index("--no-python") + 1:]
    assert wrapper[:2] == ["/bin/sh", "-c"] and wrapper[3:6] == ["${py:-python3}", "-m", "recipes.train"]
    ranks = []
    for local in range(slots):
        out = subprocess.run(wrapper[:3] + ["/bin/sh", "-c", 'echo "$GEOTRAIN_DC_RANK"'], check=True,
                             capture_output=True, text=True,
                             env={"GEOTRAIN_DC_RANK": str(first), "LOCAL_RANK": str(local)})
        ranks.append(int(out.stdout))
    return ranks


def _zone_terms(task):
    terms = task["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return [{e["key"]: e["values"] for e in term["matchExpressions"]} for term in terms]


def test_three_datacenter_mixed_gpu_job_passes_the_crd_schema_and_admission(job_validator):
    # restricted-ready: checkpoints on a claim, and no node caches (a namespace enforcing it)
    spec = make_spec(workers=8, recovery={"pvc": "geotrain-checkpoints"})
    restricted = Cluster(name="dc", kind="geotrain", config={"node_caches": False})
    job = render_volcano_job("ws-three-dcs", spec, restricted, THREE_DCS)
    errors = sorted(job_validator.iter_errors(job), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
    assert admission_errors(job) == []
    assert not {v for _, pod in pod_specs(job) for v in violations(pod, "restricted")}
    tasks = {t["name"]: t for t in job["spec"]["tasks"]}
    # fra (index 0): the master + one more H100 box, and its AMD box in a task of its own
    assert list(tasks) == ["master", "dc0-nvidia", "dc0-amd", "dc1", "dc2"]
    assert [t["replicas"] for t in tasks.values()] == [1, 1, 1, 3, 2]
    assert sum(t["replicas"] for t in tasks.values()) == job["spec"]["minAvailable"] == 8
    assert _container(tasks["dc0-amd"])["resources"]["limits"]["amd.com/gpu"] == "8"
    assert _container(tasks["dc0-nvidia"])["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert _container(tasks["dc1"])["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert _env(tasks["dc2"])["GEOTRAIN_DIST_BACKEND"] == "gloo"  # vendors mixed
    zones = {"master": "fra", "dc0-nvidia": "fra", "dc0-amd": "fra", "dc1": "lon", "dc2": "sgp.1"}
    for name, zone in zones.items():
        for term in _zone_terms(tasks[name]):
            assert term[ZONE_LABEL] == [zone]
            assert all(host.startswith(zone.split(".")[0]) for host in term["kubernetes.io/hostname"])
        env = _env(tasks[name])
        assert env["GEOTRAIN_DATACENTER"] == zone
        assert env["GEOTRAIN_DC_INDEX"] == str(["fra", "lon", "sgp.1"].index(zone))
        # 24, 3 and 2 processes: recipes/topology.py's hierarchical DiLoCo needs equal
        # datacenters, so the count (which turns it on) is left out and the job trains flat
        assert "GEOTRAIN_DC_COUNT" not in env


def test_ranks_inside_each_datacenter_cover_its_processes_once():
    """Under torchrun's static group (recovery.elastic false); elastic pods: tests/kubernetes/test_elastic_pods.py."""
    job = render_volcano_job("ws-three-dcs", make_spec(workers=8, recovery={"elastic": False}), CLUSTER, THREE_DCS)
    seen: dict[str, list[int]] = {}
    for task in job["spec"]["tasks"]:
        env, slots = _env(task), int(_container(task)["command"][2].split("--nproc-per-node=")[1].split()[0])
        for index in range(task["replicas"]):
            first = _dc_rank(task, index)
            seen.setdefault(env["GEOTRAIN_DATACENTER"], []).extend(_process_ranks(task, first, slots))
            assert int(env["GEOTRAIN_DC_SIZE"]) >= first + slots
    # fra: 8 (master) + 8 (H100) + 8 (MI300) processes; lon: 3 one-GPU pods; sgp: 2 CPU pods
    assert {dc: sorted(ranks) for dc, ranks in seen.items()} == \
        {"fra": list(range(24)), "lon": [0, 1, 2], "sgp.1": [0, 1]}
    sizes = {_env(t)["GEOTRAIN_DATACENTER"]: _env(t)["GEOTRAIN_DC_SIZE"] for t in job["spec"]["tasks"]}
    assert sizes == {"fra": "24", "lon": "3", "sgp.1": "2"}


def test_a_pod_without_volcanos_env_plugin_stops_with_one_line():
    job = render_volcano_job("ws-three-dcs", make_spec(workers=8), CLUSTER, THREE_DCS)
    task = next(t for t in job["spec"]["tasks"] if t["name"] == "dc1")
    script = _container(task)["command"][2]
    done = subprocess.run(["/bin/sh", "-c", script[:script.index("py=$(")] + "echo started"],
                          capture_output=True, text=True, env={})
    assert done.returncode == 1 and "started" not in done.stdout
    assert done.stderr.strip().splitlines() == [
        "geotrain: VC_TASK_INDEX is unset: the job needs Volcano's env plugin"]


def test_nodes_with_and_without_a_datacenter_in_one_job_are_refused_in_one_line():
    groups = [NodeGroup("nvidia", 1, ("a",), "fra"), NodeGroup("cpu", 0, ("b",))]
    with pytest.raises(InvalidInput) as caught:
        render_volcano_job("ws", make_spec(workers=2), CLUSTER, groups)
    assert caught.value.message == "node b has no datacenter, but other nodes of the job do"


def test_without_datacenters_the_job_is_as_before():
    groups = [NodeGroup("nvidia", 1, ("a", "b"))]
    job = render_volcano_job("ws", make_spec(workers=2), CLUSTER, groups)
    assert [t["name"] for t in job["spec"]["tasks"]] == ["master", "worker"]
    assert not any(e["name"].startswith("GEOTRAIN_DC") for t in job["spec"]["tasks"]
                   for e in _container(t)["env"])


def test_pod_names_stay_dns_labels_with_many_datacenters_and_a_long_job_name():
    groups = [NodeGroup(v, 1, tuple(f"n{i}-{v}-{j}" for j in range(3)), f"datacenter-{i:02d}-" + "x" * 40)
              for i in range(10) for v in ("nvidia", "amd")]
    job = render_volcano_job("w" * 60, make_spec(workers=60), CLUSTER, groups)
    assert admission_errors(job) == []
    assert "dc9-amd" in [t["name"] for t in job["spec"]["tasks"]]


def test_zone_labels_read_at_registration_reach_the_job_the_stand_in_api_accepts(fake, kubeconfig, capsys,
                                                                                job_validator):
    """`clusters add-kubernetes` reads the nodes' zone labels; deploy submits one task per
    datacenter with the real client to FakeKubeAPI (a stand-in: no API server runs here)."""
    # three datacenters, mixed GPUs: fra has one NVIDIA and one AMD box
    kinds = {"ams-0": "nvidia", "ams-1": "nvidia", "fra-0": "nvidia", "fra-1": "amd", "lon-0": "amd", "lon-1": "amd"}
    fake.nodes = [{"metadata": {"name": name, "labels": {ZONE_LABEL: name[:3]}},
                   "status": {"allocatable": {f"{vendor}.com/gpu": "2"}}} for name, vendor in kinds.items()]
    code, out, err = run(capsys, "clusters", "add-kubernetes", "three", "--kubeconfig", kubeconfig)
    assert code == 0, err
    assert "6 nodes (2× nvidia (2 GPUs) in ams, 1× nvidia (2 GPUs) in fra, 1× amd (2 GPUs) in fra, " \
        "2× amd (2 GPUs) in lon)" in out
    cluster = get_cluster(Store(), "three")
    assert {g["datacenter"] for g in cluster.config["node_groups"]} == {"fra", "lon", "ams"}
    KubernetesBackend(cluster).deploy("ws-zones", make_spec(cluster="three", workers=6), {})
    job = fake.objects[("jobs", "default", "gt-ws-zones")]
    tasks = {t["name"]: _env(t)["GEOTRAIN_DATACENTER"] for t in job["spec"]["tasks"]}
    assert tasks == {"master": "ams", "dc0": "ams", "dc1-nvidia": "fra", "dc1-amd": "fra", "dc2": "lon"}
    assert admission_errors(job) == [] and not list(job_validator.iter_errors(job))
    # equal datacenters (2 pods x 2 GPUs each): the count is there, hierarchical DiLoCo runs
    assert {(_env(t)["GEOTRAIN_DC_COUNT"], _env(t)["GEOTRAIN_DC_SIZE"]) for t in job["spec"]["tasks"]} == {("3", "4")}


def test_a_zone_label_that_is_not_a_label_value_is_refused():
    nodes = [{"metadata": {"name": "a", "labels": {ZONE_LABEL: "fra\n[red]x"}},
              "status": {"allocatable": {}}}]
    with pytest.raises(InvalidInput) as caught:
        groups_from_kubernetes(nodes)
    assert "\n" not in caught.value.message and "node a" in caught.value.message


@pytest.mark.slow
def test_real_torchrun_gives_each_process_of_a_pod_its_own_rank_in_the_datacenter():
    """The pod's wrapper under the real torchrun (--no-python), two processes, no collective."""
    job = render_volcano_job("ws-three-dcs", make_spec(workers=8, recovery={"elastic": False}), CLUSTER, THREE_DCS)
    task = next(t for t in job["spec"]["tasks"] if t["name"] == "dc0-amd")
    argv = shlex.split(_container(task)["command"][2].splitlines()[-1])
    wrapper = argv[argv.index("--no-python"):argv.index("--no-python") + 4]
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=2",
         "--monitor-interval=1", *wrapper, sys.executable, "-c",
         # one write(2) per process, under PIPE_BUF: the two processes share the pipe and a
         # print() in pieces interleaved ("ranksranks 0 16")
         "import os; os.write(1, f\"ranks {os.environ['LOCAL_RANK']} {os.environ['GEOTRAIN_DC_RANK']}\\n\".encode())"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "GEOTRAIN_DC_RANK": "16", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(line for line in done.stdout.splitlines() if line.startswith("ranks")) == \
        ["ranks 0 16", "ranks 1 17"]
