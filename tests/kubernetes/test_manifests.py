"""Rendered Volcano jobs: valid against the CRD schema and Volcano's admission rules."""

from __future__ import annotations

import copy
import itertools

import pytest
import yaml

from core.errors import InvalidInput
from core.domain.images import UPSTREAM_IMAGES
from core.kubernetes.manifests import manifests_yaml, render_manifests, render_volcano_job
from core.domain.records import Cluster
from core.kubernetes.node_groups import NodeGroup
from core.kubernetes.admission import admission_errors
from tests.kubernetes.conftest import HETEROGENEOUS, MODELS, make_spec, presets

CLUSTER = Cluster(name="dc", kind="geotrain")
TOKEN = "wandb-secret-value-123456"


def _pods(job: dict) -> list[str]:
    name = job["metadata"]["name"]
    return [f"{name}-{t['name']}-{i}" for t in job["spec"]["tasks"] for i in range(t["replicas"])]


@pytest.mark.parametrize("model,preset", list(itertools.product(MODELS, presets())))
def test_every_model_and_preset_renders_a_job_volcano_accepts(job_validator, model, preset):
    for workers in (1, 3, 7):
        spec = make_spec(model=model, preset=preset, workers=workers, tokens={"wandb": "r"})
        out = render_manifests("ws-" + model, spec, CLUSTER, HETEROGENEOUS, "default",
                               {"WANDB_API_KEY": TOKEN})
        job = out[-1]
        errors = sorted(job_validator.iter_errors(job), key=lambda e: list(e.path))
        assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
        assert admission_errors(job) == []
        assert sum(t["replicas"] for t in job["spec"]["tasks"]) == workers
        assert job["spec"]["minAvailable"] == workers
        assert all(len(p) <= 63 for p in _pods(job))
        config = yaml.safe_load(out[0]["data"]["config.yaml"])
        assert (config["model"], config["gradient_compression"]) == (model, preset)
        assert TOKEN not in yaml.safe_dump(job) and TOKEN not in yaml.safe_dump(out[0])


def test_heterogeneous_job_has_one_task_per_node_group_and_gloo():
    job = render_volcano_job("ws-mix", make_spec(workers=7), CLUSTER, HETEROGENEOUS)
    tasks = {t["name"]: t for t in job["spec"]["tasks"]}
    assert list(tasks) == ["master", "worker-nvidia", "worker-nvidia2", "worker-amd", "worker-cpu"]
    assert [t["replicas"] for t in tasks.values()] == [1, 1, 1, 2, 2]
    container = lambda t: t["template"]["spec"]["containers"][0]  # noqa: E731
    assert container(tasks["master"])["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert container(tasks["worker-amd"])["resources"]["limits"]["amd.com/gpu"] == "8"
    assert container(tasks["worker-amd"])["image"] == UPSTREAM_IMAGES["amd"]  # upstream ROCm PyTorch
    assert container(tasks["worker-nvidia"])["image"] == UPSTREAM_IMAGES["nvidia"]
    assert set(container(tasks["worker-cpu"])["resources"]["limits"]) == {"memory"}
    assert tasks["master"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in tasks["worker-amd"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in container(tasks["worker-cpu"])["env"]}
    assert env["GEOTRAIN_DIST_BACKEND"] == "gloo"
    # DiLoCo across several pods runs elastic: each pod waits for its watcher's store, then trains
    assert env["GEOTRAIN_RDZV_HOST"] == "gt-ws-mix-watcher" and env["GEOTRAIN_RDZV_PORT"] == "29401"
    assert env["GEOTRAIN_ELASTIC_STORE"] == "geotrain-store://gt-ws-mix-watcher:29401"
    assert "torchrun" not in container(tasks["worker-amd"])["command"][2]
    job = render_volcano_job("ws-mix", make_spec(workers=7, recovery={"elastic": False}), CLUSTER, HETEROGENEOUS)
    tasks = {t["name"]: t for t in job["spec"]["tasks"]}
    env = {e["name"]: e.get("value") for e in container(tasks["worker-cpu"])["env"]}
    assert env["GEOTRAIN_RDZV_HOST"] == "gt-ws-mix-master-0.gt-ws-mix"  # torchrun's static group
    script = container(tasks["worker-amd"])["command"][2]
    assert "--nnodes=7" in script and "--nproc-per-node=8" in script and "is_host=0" in script
    assert "is_host=1" in container(tasks["master"])["command"][2]
    # a lost pod restarts alone (core.kubernetes.watcher_manifests.pod_policies): no job-wide restart
    assert tasks["master"]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    assert "policies" not in job["spec"]
    assert job["spec"]["plugins"]["svc"] == ["--publish-not-ready-addresses"]
    anti = tasks["worker-cpu"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == \
        "kubernetes.io/hostname"


def test_config_map_holds_a_config_the_recipe_accepts():
    from core.domain import recipe_catalog
    from core.schema.training_config import config_errors

    spec = make_spec(workers=7, config=recipe_catalog.default_config("gpt-neo", "tiny"))
    config_map = render_manifests("ws-mix", spec, CLUSTER, HETEROGENEOUS, "default", {})[0]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert config["dist"]["backend"] == "gloo" and config["out_dir"] == "/workspace/out"
    assert config_errors(config) == []


def test_nvidia_only_job_uses_nccl_and_plain_master_worker_tasks():
    job = render_volcano_job("ws-gpu", make_spec(workers=2), CLUSTER, HETEROGENEOUS[:1])
    assert [t["name"] for t in job["spec"]["tasks"]] == ["master", "worker"]
    env = {e["name"]: e.get("value") for e in
           job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["env"]}
    assert env["GEOTRAIN_DIST_BACKEND"] == "nccl" and env["NCCL_NSOCKS_PERTHREAD"] == "4"


def test_tokens_reach_pods_only_through_a_secret_reference():
    spec = make_spec(tokens={"wandb": "ws-1/wandb", "hf": "ws-1/hf"})
    out = render_manifests("ws-1", spec, CLUSTER, HETEROGENEOUS, "team",
                           {"WANDB_API_KEY": TOKEN, "HF_TOKEN": "hf_abcdefghijkl"})
    secret, job = next(m for m in out if m["kind"] == "Secret"), out[-1]
    assert secret["kind"] == "Secret" and secret["metadata"]["namespace"] == "team"
    env = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env if "secretKeyRef" in e.get("valueFrom", {})}
    assert refs == {"HF_TOKEN": {"name": "gt-ws-1-tokens", "key": "HF_TOKEN"},
                    "WANDB_API_KEY": {"name": "gt-ws-1-tokens", "key": "WANDB_API_KEY"}}
    shown = manifests_yaml(out)
    assert TOKEN not in shown and "hf_abcdefghijkl" not in shown
    assert "WANDB_API_KEY: <hidden>" in shown
    mounts = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "config", "mountPath": "/etc/geotrain", "readOnly": True} in mounts
    assert "--config /etc/geotrain/config.yaml" in job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"][2]


def test_long_workspace_ids_give_names_within_kubernetes_limits(job_validator):
    job = render_volcano_job("My Workspace_" + "x" * 80, make_spec(workers=7), CLUSTER, HETEROGENEOUS)
    name = job["metadata"]["name"]
    assert len(name) <= 40 and name.startswith("gt-my-workspace-")
    assert all(len(p) <= 63 for p in _pods(job))
    assert admission_errors(job) == [] and not list(job_validator.iter_errors(job))


@pytest.mark.parametrize("image", ["ghcr.io/Geotrain/Recipes:1", "ghcr.io/x/y:", "ghcr.io//y", "a b", "x:tag with space",
                                   "-lead/dash", "x@sha256:short"])
def test_invalid_image_names_are_refused(image):
    with pytest.raises(InvalidInput, match="not a valid container image name"):
        render_volcano_job("ws-1", make_spec(image=image), CLUSTER, HETEROGENEOUS)


@pytest.mark.parametrize("image", ["ghcr.io/geotrain/recipes:0.1.0", "localhost:5000/recipes",
                                   "registry.example.com/team/train@sha256:" + "a" * 64, "busybox"])
def test_valid_image_names_are_used(image):
    job = render_volcano_job("ws-1", make_spec(image=image), CLUSTER, HETEROGENEOUS[:1])
    assert job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"] == image


def test_more_workers_than_nodes_is_refused():
    with pytest.raises(InvalidInput) as info:
        render_volcano_job("ws-1", make_spec(workers=8), CLUSTER, HETEROGENEOUS)
    assert "8 workers asked, but cluster 'dc' has 7 schedulable nodes" in info.value.message
    assert "--workers 7" in info.value.hint


def test_admission_checker_finds_what_the_webhook_would_refuse():
    good = render_volcano_job("ws-1", make_spec(workers=3), CLUSTER, [NodeGroup("cpu", 0, ("a", "b", "c"))])
    bad = copy.deepcopy(good)
    bad["spec"]["tasks"].append(copy.deepcopy(bad["spec"]["tasks"][1]))
    bad["spec"]["tasks"][0]["minAvailable"] = 2
    bad["spec"]["minAvailable"] = 99
    bad["spec"]["plugins"]["horovod"] = []
    bad["spec"]["policies"] = [{"event": "PodFailed", "action": "Reboot"}]
    errors = admission_errors(bad)
    assert any("duplicate task name" in e for e in errors)
    assert any("minAvailable 2 > replicas 1" in e for e in errors)
    assert any("job minAvailable 99 > total replicas" in e for e in errors)
    assert any("unknown plugin 'horovod'" in e for e in errors)
    assert any("'Reboot'" in e for e in errors)


def test_schema_catches_a_malformed_job(job_validator):
    job = render_volcano_job("ws-1", make_spec(), CLUSTER, HETEROGENEOUS[:1])
    job["spec"]["tasks"][0]["policies"][0]["event"] = "PodExploded"
    job["spec"]["tasks"][0]["replicas"] = "two"
    messages = [e.message for e in job_validator.iter_errors(job)]
    assert any("PodExploded" in m for m in messages) and any("'two'" in m for m in messages)
