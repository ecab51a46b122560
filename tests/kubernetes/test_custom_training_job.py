"""A custom-training workspace rendered for Kubernetes: torchrun runs the user's command (argv,
`--no-python`) with the catalog workspace's topology, rendezvous, checkpoint volume, tokens and
W&B wiring, its --workdir delivered as ConfigMaps; the Job passes what the real parts would check
(they cannot run here): the Volcano CRD schema (vendored) and admission rules, Pod Security
"restricted", and kubernetes-validate (Kubernetes' own OpenAPI schemas, strict). The rendered
pod script is then run for real as two "pods" (tests/kubernetes/test_pod_command.py's stand-ins
for DNS and the pod IP) on the README's own example: geotrain_loop under torchrun's agent store."""

from __future__ import annotations

import json
import re

import pytest

from core.domain.records import Cluster, WorkspaceSpec
from core.errors import InvalidInput
from core.kubernetes.admission import admission_errors
from core.kubernetes.custom_command import WORKDIR_MOUNT, with_loop_package
from core.kubernetes.recipes_delivery import recipes_files
from core.kubernetes.manifests import manifests_yaml, render_manifests, render_volcano_job
from core.kubernetes.node_groups import NodeGroup
from core.kubernetes.pod_security import pod_specs, violations
from tests.kubernetes.conftest import HETEROGENEOUS, REPO, run
from tests.kubernetes.test_workspaces_on_kubernetes import registered  # noqa: F401  (the fixture)
from tests.kubernetes.test_mixed_cluster import _valid
from tests.kubernetes.test_pod_command import _free_port, _pod_process
from tests.test_readme_loop import snippet

CLUSTER = Cluster(name="dc", kind="geotrain", config={"pod_security_enforce": "restricted"})
EXAMPLES = REPO / "tests" / "examples"


def custom_spec(**overrides) -> WorkspaceSpec:
    fields = dict(cluster="dc", model="custom", size="own", preset="high", workers=3, steps=100,
                  template="custom-training", workdir=str(EXAMPLES), tokens={"wandb": "r"},
                  command=["python", "train_plain.py", "--mode", "api", "--tag", "$(touch /tmp/pwned)"],
                  config={"logging": {"wandb_project": "geotrain-custom-abc123"}},
                  recovery={"storage_class": "nfs-rwx"})
    return WorkspaceSpec.from_dict({**fields, **overrides})


def _trainer(job: dict, task: int = 0) -> dict:
    return job["spec"]["tasks"][task]["template"]["spec"]["containers"][0]


def test_the_job_runs_the_command_and_passes_every_validator(job_validator):
    out = render_manifests("custom-abc123", custom_spec(), CLUSTER, HETEROGENEOUS, "default",
                           {"WANDB_API_KEY": "secret-value-not-shown"})
    job = out[-1]
    errors = sorted(job_validator.iter_errors(job), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
    assert admission_errors(job) == [] and sum(t["replicas"] for t in job["spec"]["tasks"]) == 3
    for task, pod in pod_specs(job):
        assert violations(pod, "restricted") == [], task
        spec_only = {k: v for k, v in pod.items() if k != "metadata"}
        _valid({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"custom-{task}", **pod["metadata"]},
                "spec": spec_only})
        container = pod["containers"][0]
        script = container["command"][2]
        # the command's words, quoted for the pod's shell: the $( ) reaches the script as text
        assert script.rstrip().endswith("""--no-python "$py" train_plain.py --mode api --tag '$(touch /tmp/pwned)'""")
        assert "recipes.train" not in script and "--rdzv-endpoint" in script
        env = {e["name"]: e.get("value") or e.get("valueFrom") for e in container["env"]}
        assert env["GEOTRAIN_OUT_DIR"] == "/workspace/out" and env["GEOTRAIN_PRESET"] == "high"
        assert env["WANDB_PROJECT"] == "geotrain-custom-abc123"
        assert env["WANDB_API_KEY"] == {"secretKeyRef": {"name": job["metadata"]["name"] + "-tokens",
                                                         "key": "WANDB_API_KEY"}}
        assert container["workingDir"] == WORKDIR_MOUNT
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["workdir"]["readOnly"] and mounts["workdir"]["mountPath"] == WORKDIR_MOUNT
        assert mounts["checkpoints"]["mountPath"] == env["GEOTRAIN_CHECKPOINT_DIR"]  # the workspace's claim
    for obj in out[:-1]:  # ConfigMaps (config, recipes, workdir), Secret, claim, NetworkPolicy, watcher's
        if obj["apiVersion"].startswith("batch.volcano.sh"):
            continue
        _valid(obj)
    maps = {m["metadata"]["name"]: m for m in out if m["kind"] == "ConfigMap"}
    shipped = [v for name, m in maps.items() if "-workdir-" in name for v in m["data"].values()]
    assert any("def tiny_gpt_neo" in text for text in shipped)  # the user's own source
    projected = str([v for task in job["spec"]["tasks"] for v in task["template"]["spec"]["volumes"]])
    assert "geotrain_loop/loop.py" in projected and "recipes/geotrain_loop/loop.py" in projected
    assert "secret-value-not-shown" not in manifests_yaml(out)
    assert "from the workspace's --workdir" in manifests_yaml(out)


def test_an_image_with_the_code_baked_in_runs_in_its_own_workdir():
    spec = custom_spec(image="registry.example.com/team/trainer:1", workdir=None,
                       command=["/usr/bin/python3", "-m", "team.train"])
    job = render_volcano_job("custom-img", spec, CLUSTER, [NodeGroup("cpu", 0, ("a", "b", "c"))])
    container = _trainer(job)
    assert container["image"] == "registry.example.com/team/trainer:1"
    assert "workingDir" not in container and "recipes-src" not in str(job)
    assert container["command"][2].rstrip().endswith("--no-python /usr/bin/python3 -m team.train")


def test_a_workdir_that_cannot_ship_is_one_line(tmp_path):
    (tmp_path / "train.py").write_bytes(b"\xff\xfe not text")
    spec = custom_spec(workdir=str(tmp_path))
    with pytest.raises(InvalidInput, match="is not UTF-8 text") as caught:
        render_manifests("custom-bin", spec, CLUSTER, HETEROGENEOUS, "default", {})
    assert "--image" in caught.value.hint


@pytest.mark.slow
def test_the_rendered_pods_run_the_readme_loop_under_torchrun(tmp_path):
    (tmp_path / "train.py").write_text("import geotrain_loop\nprint('geotrain_loop from', geotrain_loop.__file__)\n"
                                        + snippet())
    spec = custom_spec(workers=2, preset="medium", workdir=str(tmp_path), command=["python", "train.py"])
    job = render_volcano_job("custom-run", spec, Cluster("dc", "geotrain"), [NodeGroup("cpu", 0, ("a", "b"))])
    for source in with_loop_package(recipes_files()):  # what the pods' recipes volume holds, on PYTHONPATH
        (tmp_path / source.path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / source.path).write_text(source.text)
    port = _free_port()
    procs = [_pod_process(task, tmp_path, port, OMP_NUM_THREADS="1") for task in job["spec"]["tasks"]]
    outputs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        outputs.append(out)
        assert proc.returncode == 0, out[-3000:]
    sent = [int(n.replace(",", "")) for out in outputs for n in re.findall(r"sent ([0-9,]+) bytes", out)]
    assert len(sent) == 2 and sent[0] == sent[1] > 0
    assert all("geotrain_loop: preset medium (diloco, H=12" in out for out in outputs)
    assert all(str(tmp_path / "geotrain_loop") in out for out in outputs)  # the delivered copy ran


def test_the_loops_progress_lines_are_what_the_backend_reads_curves_from(capsys, monkeypatch):
    """On Kubernetes the curves come from rank 0's progress lines (core.kubernetes.pod_logs): geotrain_loop
    prints them in recipes.train's own format."""
    import torch

    import geotrain_loop
    from core.kubernetes.pod_logs import progress_row

    for var in ("RANK", "WORLD_SIZE", "GEOTRAIN_GROUP_STORE", "GEOTRAIN_OUT_DIR"):
        monkeypatch.delenv(var, raising=False)
    model = torch.nn.Linear(4, 1)
    loop = geotrain_loop.Loop(model, torch.optim.AdamW(model.parameters(), lr=1e-3), "low", steps=20)
    for _ in range(20):
        loss = model(torch.randn(8, 4)).square().mean()
        loss.backward()
        loop.step(loss)
    rows = [row for line in capsys.readouterr().out.splitlines() if (row := progress_row(line))]
    assert [(r["step"], r["lr"], r["outer_step"]) for r in rows] == [(10, 0.001, 1), (20, 0.001, 2)]


def test_cli_deploys_and_deletes_a_custom_workspace_on_the_stand_in_cluster(registered, capsys):
    """Through the CLI, the service and the real `kubernetes` client to FakeKubeAPI (the stand-in API
    server): the Job runs the command, the workdir's ConfigMaps are created with it and go with delete."""
    fake = registered
    code, out, err = run(capsys, "workspaces", "deploy", "custom-training", "--cluster", "mycluster", "--workers", "2",
                         "--workdir", str(EXAMPLES), "--command", "python train_hf.py --preset medium", "--json",
                         "--yes")
    assert code == 0, err
    workspace_id = json.loads(out)["id"]
    (job,) = fake.jobs()
    assert _trainer(job)["command"][2].rstrip().endswith('--no-python "$py" train_hf.py --preset medium')
    maps = [name for (kind, _, name) in fake.objects if kind == "configmaps"]
    assert any("-workdir-" in name for name in maps) and any("-recipes-" in name for name in maps)
    code, out, _ = run(capsys, "workspaces", "delete", workspace_id, "--yes")
    assert code == 0 and not [k for k in fake.objects if k[0] in ("jobs", "secrets", "configmaps")]


def test_datacenters_of_multi_gpu_pods_give_each_process_its_rank_before_the_command(job_validator):
    """Hierarchical layout on Kubernetes (core.kubernetes.datacenter_tasks): a pod of several GPUs starts each
    process through a shell that adds its LOCAL_RANK to GEOTRAIN_DC_RANK, then execs the user's command."""
    groups = [NodeGroup("nvidia", 4, ("fra-a", "fra-b"), "fra"), NodeGroup("nvidia", 4, ("lon-a", "lon-b"), "lon")]
    spec = custom_spec(workers=4, config={"datacenters": 2}, command=["python", "train.py", "--x", "1"])
    job = render_volcano_job("custom-dc", spec, Cluster("dc", "geotrain"), groups)
    assert not list(job_validator.iter_errors(job)) and admission_errors(job) == []
    for task in job["spec"]["tasks"]:
        script = task["template"]["spec"]["containers"][0]["command"][2]
        assert script.rstrip().endswith("--monitor-interval=1 --no-python /bin/sh -c 'GEOTRAIN_DC_RANK=$(("
                                        "GEOTRAIN_DC_RANK + LOCAL_RANK)) exec \"$0\" \"$@\"' \"$py\" train.py --x 1")
