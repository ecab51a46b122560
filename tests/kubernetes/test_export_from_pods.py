"""`workspaces export` of a Kubernetes workspace against the stand-in API server: pod logs
and metrics through the API (the real `kubernetes` client over HTTP), the resolved config
from the job's ConfigMap rendering. Checkpoints stay in the pods' volume: copying them out
needs pod exec (a websocket), which the stand-in cannot serve (see the report of issue 16)."""

from __future__ import annotations

import json

from core.domain.records import WorkspaceSpec
from core.workspaces import WorkspaceService
from tests.kubernetes.conftest import run


def test_export_of_a_pod_workspace_keeps_logs_metrics_and_config(fake, kubeconfig, capsys, tmp_path):
    code, _, err = run(capsys, "clusters", "add-kubernetes", "mycluster", "--kubeconfig", kubeconfig)
    assert code == 0, err
    spec = WorkspaceSpec(cluster="mycluster", model="gpt-neo", size="tiny", preset="medium", workers=2,
                         steps=20, config={"model": "gpt-neo", "size": "tiny",
                                           "gradient_compression": "medium", "steps": 20})
    ws = WorkspaceService().deploy(spec, {"wandb": "wandb-export-token-1234567", "hf": None})
    job = f"gt-{ws.id}"
    master, worker = fake.add_pod(job, "master", 0), fake.add_pod(job, "worker", 0)
    fake.set_job_phase(job, "Running")
    fake.write_log(master, b"[rank 0] step 10/20 loss 3.1416 lr 3.00e-03 outer 0 sent 0.125MB 12.5ms/step\n")
    fake.write_log(worker, b"[rank 1] up [red]not markup[/]\n")

    dest = tmp_path / "exported"
    code, out, err = run(capsys, "workspaces", "export", ws.id, str(dest))
    assert code == 0, err
    assert "Checkpoints stay in the pods' volume" in out
    manifest = json.loads((dest / "geotrain-export.json").read_text())
    assert manifest["checkpoints_copied"] is False and manifest["cluster"] == "mycluster"
    assert (dest / "logs" / "master-0.log").read_text() == (
        "[rank 0] step 10/20 loss 3.1416 lr 3.00e-03 outer 0 sent 0.125MB 12.5ms/step\n")
    assert (dest / "logs" / "worker-0.log").read_text() == "[rank 1] up [red]not markup[/]\n"
    assert [json.loads(line)["loss"] for line in (dest / "metrics.jsonl").read_text().splitlines()] == [3.1416]
    config = (dest / "config.yaml").read_text()
    assert f"wandb_project: geotrain-{ws.id}" in config  # the project this workspace logs to
    assert "wandb-export-token" not in "".join(p.read_text() for p in dest.rglob("*") if p.is_file())
    code, _, err = run(capsys, "workspaces", "export", ws.id, str(dest))
    assert code == 2 and "already holds a geotrain export" in err
