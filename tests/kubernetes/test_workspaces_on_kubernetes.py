"""End to end: a registered Kubernetes cluster behind the workspace service and CLI.

The cluster is FakeKubeAPI: a stand-in for a real Kubernetes API server (with Volcano),
which cannot run here; everything above it (CLI, service, SQLite, secret store,
`kubernetes` client over HTTP) is the real thing.
"""

from __future__ import annotations

import json

import pytest

from core.state import paths

from core.domain.records import WorkspaceSpec
from core.workspaces import WorkspaceService
from tests.kubernetes.conftest import run

TOKEN = "wandb-e2e-token-987654321"


@pytest.fixture
def registered(fake, kubeconfig, capsys):
    code, _, err = run(capsys, "clusters", "add-kubernetes", "mycluster", "--kubeconfig", kubeconfig)
    assert code == 0, err
    return fake


def test_service_and_cli_run_a_workspace_on_the_cluster(registered, capsys):
    fake = registered
    spec = WorkspaceSpec(cluster="mycluster", model="gpt-neo", size="tiny", preset="medium",
                         workers=2, steps=20, config={"model": "gpt-neo", "size": "tiny",
                                                      "gradient_compression": "medium", "steps": 20})
    ws = WorkspaceService().deploy(spec, {"wandb": TOKEN, "hf": None})
    job = f"gt-{ws.id}"
    assert ws.run_dir == f"default/{job}" and ws.status == "PENDING"
    assert fake.objects[("secrets", "default", f"{job}-tokens")]["stringData"] == {"WANDB_API_KEY": TOKEN}
    assert TOKEN.encode() not in paths.database_path().read_bytes()
    tasks = fake.objects[("jobs", "default", job)]["spec"]["tasks"]
    assert [(t["name"], t["replicas"]) for t in tasks] == [("master", 1), ("worker", 1)]

    master = fake.add_pod(job, "master", 0)
    worker = fake.add_pod(job, "worker", 0)
    fake.set_job_phase(job, "Running")
    fake.write_log(master, b"[rank 0] step 10/20 loss 3.1416 lr 3.00e-03 outer 0 sent 0.125MB 12.5ms/step\n")
    fake.write_log(worker, b"rank 1 up\n")
    code, out, _ = run(capsys, "workspaces", "list", "--json")
    assert code == 0 and [(w["id"], w["status"], w["last_loss"]) for w in json.loads(out)] == \
        [(ws.id, "RUNNING", 3.1416)]
    assert WorkspaceService().metrics(ws.id) == [{"step": 10, "loss": 3.1416, "lr": 0.003, "outer_step": 0,
                                                  "bytes_sent": 125000, "step_time": 0.0125}]
    code, out, _ = run(capsys, "workspaces", "show", ws.id)
    assert "RUNNING  (1 of 2 training; not yet: worker-0)" in out  # worker-0 has printed no step yet
    assert "master-0: RUNNING" in out and "worker-0: RENDEZVOUS started, no training step yet" in out
    code, out, _ = run(capsys, "workspaces", "logs", ws.id)
    assert out.splitlines() == ["[master-0] [rank 0] step 10/20 loss 3.1416 lr 3.00e-03 outer 0 sent "
                                "0.125MB 12.5ms/step", "[worker-0] rank 1 up"]

    code, out, _ = run(capsys, "workspaces", "delete", ws.id, "--yes")
    assert code == 0 and f"Deleted {ws.id}." in out
    assert not [k for k in fake.objects if k[0] in ("jobs", "secrets", "configmaps", "pods")]
    code, out, _ = run(capsys, "workspaces", "list", "--json")
    assert json.loads(out) == []


def test_cli_dry_run_prints_manifests_without_contacting_the_cluster(registered, capsys):
    fake = registered
    before = len(fake.requests)
    code, out, err = run(capsys, "workspaces", "deploy", "distributed-training", "--cluster", "mycluster",
                         "--model", "gpt-neo", "--size", "tiny", "--workers", "3", "--dry-run",
                         "--wandb-token", TOKEN)
    assert code == 0, err
    assert "kind: Job" in out and "kind: ConfigMap" in out and "schedulerName: volcano" in out
    assert TOKEN not in out
    assert len(fake.requests) == before and fake.jobs() == []
    code, out, err = run(capsys, "workspaces", "deploy", "distributed-training", "--cluster", "mycluster",
                         "--model", "gpt-neo", "--size", "tiny", "--workers", "2", "--steps", "5")
    assert code == 0, err
    assert len(fake.jobs()) == 1
