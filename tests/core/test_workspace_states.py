"""A real local workspace (two torchrun-less elastic workers on gloo, real files) goes
PREPARING_DATA → RENDEZVOUS → RUNNING → COMPLETED, and `geotrain workspaces list`,
`show` and `logs` say so. Its data is a local JSONL corpus tokenised at start (the c4
loader, offline), which is what makes PREPARING_DATA last long enough to be seen."""

import json
import time

import pytest

from core.cli import main
from core.workspaces import DeployRequest, WorkspaceService

pytestmark = pytest.mark.slow


def _listed(capsys, workspace_id: str) -> str:
    assert main(["workspaces", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    return next(r["status"] for r in rows if r["id"] == workspace_id)


def test_local_run_goes_through_preparing_data_rendezvous_running_completed(geotrain_home, tmp_path,
                                                                           monkeypatch, capsys):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # the workers inherit it: nothing downloads
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"document {i} " + "lorem ipsum dolor " * 20}) + "\n"
                              for i in range(100)))
    config = (f"data: {{source: c4, path: {corpus}, tokenizer: bytes, batch_size: 4, seq_len: 32}}\n"
              "logging: {wandb: false, log_every: 5, eval_batches: 0}\n")
    service = WorkspaceService()
    ws = service.deploy(service.build_spec(DeployRequest(workers=2, steps=10, config_text=config)), {})

    seen: list[str] = []
    deadline = time.time() + 240
    while time.time() < deadline:
        status = _listed(capsys, ws.id)  # the CLI's list, as a user would read it
        if not seen or seen[-1] != status:
            seen.append(status)
        if status in ("COMPLETED", "FAILED"):
            break
        time.sleep(0.1)
    assert seen[-1] == "COMPLETED", seen
    order = [s for s in seen if s in ("PREPARING_DATA", "RUNNING", "COMPLETED")]
    assert order == ["PREPARING_DATA", "RUNNING", "COMPLETED"], seen

    # The history keeps every state the supervisor derived, with who held it up.
    states = [e for e in service.events(ws.id) if e["kind"] == "state"]
    assert [e["status"] for e in states][:3] == ["PREPARING_DATA", "RENDEZVOUS", "RUNNING"], states
    assert "preparing c4" in states[0]["reason"]
    assert main(["workspaces", "show", ws.id]) == 0
    shown = capsys.readouterr().out
    assert "state: PREPARING_DATA (worker-" in shown and "state: RENDEZVOUS" in shown

    assert main(["workspaces", "logs", ws.id]) == 0
    logs = capsys.readouterr().out.splitlines()
    assert any(line.startswith("[worker-1] ▸ data ready: c4: ") for line in logs), logs
    assert any(line.startswith("[worker-0] ▸ joined: rank 0 at step 0") for line in logs), logs
    assert not any("geotrain-event" in line for line in logs)
    assert main(["workspaces", "logs", ws.id, "--no-events"]) == 0
    quiet = capsys.readouterr().out.splitlines()
    assert not any("▸" in line or "geotrain-event" in line for line in quiet)
    assert any("step 10/10" in line for line in quiet)
