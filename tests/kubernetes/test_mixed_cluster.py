"""Must show (issue 41): a cluster of an x86 NVIDIA server, an x86 AMD agent and an arm64 GH200
agent in three datacenters, built in a dry run, and a 3-datacenter workspace rendered for it:
every image matches its node's architecture and vendor, and every object passes what the real
parts would check (they cannot run here):
  - the Volcano Job CRD's schema (tests/kubernetes/fixtures/volcano, vendored) and Volcano's
    admission rules (core.kubernetes.admission, from volcano pkg/webhooks/admission/jobs),
  - Pod Security "restricted" (core.kubernetes.pod_security, from k8s pod-security-admission),
  - a third-party validator: kubernetes-validate (PyPI), Kubernetes' own OpenAPI schemas in
    strict mode, for every built-in object (pod templates as Pods, the device-plugin DaemonSets).
Images' platforms: core.domain.images.IMAGE_ARCHES and core.bootstrap.volcano.PLUGIN_ARCHES,
each with its upstream source.
"""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from core.bootstrap import containerd, k3s, versions, volcano
from core.bootstrap.deploy import build_plan, deploy
from core.domain.architectures import ARCH_LABEL
from core.domain.datacenters import ZONE_LABEL
from core.domain.images import IMAGE_ARCHES
from core.domain.records import Cluster, Node
from core.kubernetes.admission import admission_errors
from core.kubernetes.manifests import render_manifests
from core.kubernetes.node_groups import GPU_RESOURCE, groups_from_nodes
from core.kubernetes.pod_security import pod_specs, violations
from core.state.node_records import add_nodes
from core.state.store import Store
from tests.kubernetes.conftest import make_spec
from tests.kubernetes.test_gpu_device_access import cri_runtime

K8S = versions.k8s_minor(versions.K3S_VERSION) + ".0"  # the schemas of the Kubernetes k3s runs


def _gpus(vendor, name, count):
    return [{"vendor": vendor, "name": name, "index": i} for i in range(count)]


NODES = [  # name, datacenter, `uname -m`, GPUs; the first is the server
    Node("nv-x86", "198.51.100.10", "root", datacenter="ams",
         facts={"system": {"arch": "x86_64"}, "gpus": _gpus("nvidia", "NVIDIA H100 80GB HBM3", 8)}),
    Node("amd-x86", "198.51.100.11", "root", datacenter="fra",
         facts={"system": {"arch": "x86_64"}, "gpus": _gpus("amd", "AMD Instinct MI300X", 8),
                "device_groups": {"video": 44, "render": 992}}),
    Node("gh200", "198.51.100.12", "root", datacenter="waw",
         facts={"system": {"arch": "aarch64"}, "gpus": _gpus("nvidia", "NVIDIA GH200 480GB", 1)}),
]
ARCH = {"nv-x86": "amd64", "amd-x86": "amd64", "gh200": "arm64"}
VENDOR = {"nv-x86": "nvidia", "amd-x86": "amd", "gh200": "nvidia"}


def _valid(obj: dict) -> None:
    """kubernetes-validate, strict (unknown fields refused), against the pinned Kubernetes minor."""
    kubernetes_validate.validate(obj, K8S, strict=True)


@pytest.fixture
def built(geotrain_home):
    store = Store()
    add_nodes(store, NODES)
    plan = build_plan(store, "mix", [n.name for n in NODES], subnet="10.77.0.0/24")
    result = deploy(plan, dry_run=True, store=store)
    assert result.summary.ok, result.summary.lines()
    return result


def _puts(result, node):
    return {r.command.split()[1]: r.content for r in result.command_log.for_node(node) if r.kind == "put"}


def test_the_rendered_cluster_gives_each_node_what_its_cpu_and_gpus_run(built):
    for node in NODES:
        name, arch = node.name, ARCH[node.name]
        commands = " ".join(r.command for r in built.command_log.for_node(name))
        assert versions.containerd_tarball(arch) in commands  # the release for its CPU
        assert ("/k3s-arm64" in commands) is (arch == "arm64")
        puts = _puts(built, name)
        config = yaml.safe_load(puts["/etc/rancher/k3s/config.yaml"])
        assert f"{ZONE_LABEL}={node.datacenter}" in config["node-label"]
        assert f"{k3s.GPU_VENDOR_LABEL}={VENDOR[name]}" in config["node-label"]
        cri = cri_runtime(puts[containerd.CONFIG_PATH])
        assert cri["device_ownership_from_security_context"] is True
        assert cri["containerd"]["default_runtime_name"] == ("nvidia" if VENDOR[name] == "nvidia" else "runc")
    server = _puts(built, "nv-x86")
    plugins = [yaml.safe_load(server[f"{volcano.REMOTE_DIR}/{name}.yaml"])
               for name in ("nvidia-device-plugin-daemonset", "amdgpu-device-plugin-daemonset")]
    for node in NODES:  # the node's labels, as k3s and the kubelet set them
        labels = {k3s.GPU_VENDOR_LABEL: VENDOR[node.name], ARCH_LABEL: ARCH[node.name]}
        runs = [p for p in plugins
                if all(labels.get(k) == v for k, v in p["spec"]["template"]["spec"]["nodeSelector"].items())]
        assert len(runs) == 1, node.name
        vendor = runs[0]["spec"]["template"]["spec"]["nodeSelector"][k3s.GPU_VENDOR_LABEL]
        assert vendor == VENDOR[node.name] and ARCH[node.name] in volcano.PLUGIN_ARCHES[vendor]
    for plugin in plugins:
        _valid(plugin)


def test_a_three_datacenter_workspace_runs_the_right_image_on_every_node(job_validator):
    cluster = Cluster(name="mix", kind="geotrain", config={"pod_security_enforce": "restricted"},
                      nodes=[n.name for n in NODES])
    spec = make_spec(cluster="mix", workers=3, preset="medium", tokens={"wandb": "r"},
                     recovery={"storage_class": "nfs-rwx"})
    out = render_manifests("ws-mix", spec, cluster, groups_from_nodes(NODES), "default",
                           {"WANDB_API_KEY": "secret-value-not-shown"})
    job = out[-1]
    errors = sorted(job_validator.iter_errors(job), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
    assert admission_errors(job) == []
    placed = {}
    for task, pod in pod_specs(job):
        assert violations(pod, "restricted") == [], task
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        where = {e["key"]: e["values"] for t in terms for e in t["matchExpressions"]}
        (host,) = where["kubernetes.io/hostname"]
        assert where[ARCH_LABEL] == [ARCH[host]]
        container = pod["containers"][0]
        assert ARCH[host] in IMAGE_ARCHES[container["image"]], (host, container["image"])
        gpu = [v for v, key in GPU_RESOURCE.items() if key in container["resources"]["limits"]]
        assert gpu == [VENDOR[host]]
        assert ("rocm" in container["image"]) is (VENDOR[host] == "amd")
        env = {e["name"]: e.get("value") for e in container["env"]}
        placed[host] = (env["GEOTRAIN_DATACENTER"], where[ZONE_LABEL])
        spec_only = {k: v for k, v in pod.items() if k != "metadata"}  # pod_specs adds the template's metadata
        _valid({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"ws-mix-{task}", **pod["metadata"]},
                "spec": spec_only})
    assert placed == {n.name: (n.datacenter, [n.datacenter]) for n in NODES}  # three datacenters, one each
    for obj in out[:-1]:  # ConfigMaps, Secret, claim, NetworkPolicy
        _valid(obj)



def _record_built(store, plan) -> None:
    """What a finished deploy records (core.bootstrap.deploy: the cluster with plan_config, its
    members in cluster_nodes), so `workspaces deploy` finds the cluster the dry run above built."""
    from core.bootstrap.deploy import plan_config
    from core.state.cluster_records import save_cluster

    save_cluster(store, Cluster(name=plan.name, kind="geotrain", config=plan_config(plan)))
    with store.write() as conn:
        for spec in plan.nodes:
            conn.execute("INSERT INTO cluster_nodes(cluster, node, role, mesh_ip, state) VALUES (?,?,?,?,?)",
                         (plan.name, spec.name, spec.role, spec.mesh_ip, "{}"))


def test_the_cli_dry_run_of_a_three_datacenter_workspace_on_it(built, job_validator, capsys):
    """`geotrain workspaces deploy ... --dry-run` prints every object; each pod-bearing one (the Job's
    tasks, the watcher's Deployment) runs an image built for the CPU its pods are held to."""
    from core.cli import main

    store = Store()
    _record_built(store, build_plan(store, "mix", [n.name for n in NODES], subnet="10.77.0.0/24"))
    assert main(["workspaces", "deploy", "distributed-training", "--cluster", "mix", "--workers", "3",
                 "--gradient-compression", "medium", "--dry-run"]) == 0
    printed = capsys.readouterr().out.split("# resolved config:")[0]
    objects = [doc for doc in yaml.safe_load_all(printed) if doc]
    job = next(o for o in objects if o["kind"] == "Job")
    assert not list(job_validator.iter_errors(job)) and admission_errors(job) == []
    assert len({t["name"] for t in job["spec"]["tasks"]}) == 3
    for task, pod in pod_specs(job):
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        where = {e["key"]: e["values"] for t in terms for e in t["matchExpressions"]}
        (host,) = where["kubernetes.io/hostname"]
        assert where[ARCH_LABEL] == [ARCH[host]] and ARCH[host] in IMAGE_ARCHES[pod["containers"][0]["image"]]
    for obj in objects:
        if obj["kind"] == "Deployment":  # the watcher: the master's image, on a node of its CPU
            pod = obj["spec"]["template"]["spec"]
            assert pod["nodeSelector"][ARCH_LABEL] in IMAGE_ARCHES[pod["containers"][0]["image"]]
            assert violations({**pod, "metadata": obj["spec"]["template"]["metadata"]}, "restricted") == []
        if obj["kind"] != "Job" and "<" not in str(obj.get("data", {})):  # a shown Secret / recipes count
            _valid(obj)
