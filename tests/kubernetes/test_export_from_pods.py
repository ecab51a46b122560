"""`workspaces export` of a Kubernetes workspace against the stand-in API server: pod logs
and metrics through the API (the real `kubernetes` client over HTTP), the resolved config
from the job's ConfigMap rendering, and checkpoints through pod exec, a real websocket the stand-in
serves with what the test's container writes."""

from __future__ import annotations

import base64
import io
import json
import tarfile

from core.domain.records import WorkspaceSpec
from core.kubernetes import pod_files
from core.workspaces import WorkspaceService
from tests.kubernetes.conftest import run


def _deploy(fake, kubeconfig, capsys):
    code, _, err = run(capsys, "clusters", "add-kubernetes", "mycluster", "--kubeconfig", kubeconfig)
    assert code == 0, err
    spec = WorkspaceSpec(cluster="mycluster", model="gpt-neo", size="tiny", preset="medium", workers=2,
                         steps=20, config={"model": "gpt-neo", "size": "tiny",
                                           "gradient_compression": "medium", "steps": 20})
    ws = WorkspaceService().deploy(spec, {"wandb": "wandb-export-token-1234567", "hf": None})
    job = f"gt-{ws.id}"
    master, worker = fake.add_pod(job, "master", 0), fake.add_pod(job, "worker", 0)
    fake.set_job_phase(job, "Running")
    return ws, master, worker


def test_export_of_a_pod_workspace_keeps_logs_metrics_and_config(fake, kubeconfig, capsys, tmp_path):
    ws, master, worker = _deploy(fake, kubeconfig, capsys)
    fake.write_log(master, b"[rank 0] step 10/20 loss 3.1416 lr 3.00e-03 outer 0 sent 0.125MB 12.5ms/step\n")
    fake.write_log(worker, b"[rank 1] up [red]not markup[/]\n")

    dest = tmp_path / "exported"
    code, out, err = run(capsys, "workspaces", "export", ws.id, str(dest))
    assert code == 0, err
    assert "Checkpoints NOT exported: reading the checkpoints of pod" in out, out  # its exec wrote nothing
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


def _tar(members: list[tuple[str, bytes | str | None, bytes]]) -> bytes:
    """A tar as `tar cf - -C /checkpoints .` would write it, hostile members included."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, data.decode()
                tar.addfile(info)
            elif kind == "dev":
                info.type = tarfile.CHRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_checkpoints_of_running_pods_are_merged_and_hostile_members_skipped(fake, kubeconfig, capsys, tmp_path):
    """Pods, the API and the exec websocket are the stand-in's; the client is the real one."""
    ws, master, worker = _deploy(fake, kubeconfig, capsys)
    archives = {
        master: _tar([("./step_00000010/rank_0.pt", None, b"weights-0"),
                      ("./step_00000010/rank_0.json", None, b"{}"),
                      ("./step_00000010/rank_9.pt", "link", b"/etc/passwd"),
                      ("./../escape.pt", None, b"x"), ("/abs/step_00000010/rank_3.pt", None, b"x")]),
        worker: _tar([("./step_00000010/rank_1.pt", None, b"weights-1"),
                      ("./step_00000010/rank_1.json", None, b"{}"), ("./step_00000010/rank_0.pt", None, b"other"),
                      ("./dev", "dev", b""), ("./notes.txt", None, b"hi")])}
    for pod, archive in archives.items():  # wrapped lines, as `base64` prints, then the command's exit line
        text = base64.encodebytes(archive) + f"{pod_files.SENTINEL} 0\n".encode()
        fake.exec_output[pod] = [text[i:i + 1000] for i in range(0, len(text), 1000)]
    dest = tmp_path / "exported"
    code, out, err = run(capsys, "workspaces", "export", ws.id, str(dest))
    assert code == 0, err
    assert sorted(pod for pod, _ in fake.execs) == sorted([master, worker]), out
    assert all((q["container"], q["command"], q["stdin"], q["stdout"], q["tty"]) ==
               (["trainer"], pod_files.TAR_COMMAND, ["false"], ["true"], ["false"]) for _, q in fake.execs), fake.execs
    manifest = json.loads((dest / "geotrain-export.json").read_text())
    assert manifest["checkpoints_copied"] and manifest["checkpoint_steps"] == [10]
    ckpt = dest / "checkpoints" / "step_00000010"
    assert sorted(p.name for p in ckpt.iterdir()) == ["rank_0.json", "rank_0.pt", "rank_1.json", "rank_1.pt"]
    assert (ckpt / "rank_0.pt").read_bytes() == b"weights-0" and (ckpt / "rank_1.pt").read_bytes() == b"weights-1"
    assert {"checkpoints/step_00000010/rank_9.pt", "checkpoints/../escape.pt", "checkpoints/dev",
            "checkpoints/notes.txt"} <= set(manifest["skipped"])
    assert not (tmp_path / "escape.pt").exists() and not list(dest.rglob("*.txt"))
    assert "Skipped" in out and "Continue it with" in out


def test_skipped_member_names_reach_the_terminal_without_control_characters(capsys, monkeypatch):
    """The pod names its tar members: escape sequences in one are removed, a newline is a space.
    (A stand-in service returns the manifest; the export itself is tested above.)"""
    from types import SimpleNamespace

    from core.cli import workspace_results

    class StandInService:
        def export(self, workspace_id, directory):
            return {"files": {}, "checkpoint_steps": [], "checkpoints_copied": True,
                    "skipped": ["checkpoints/a\x1b[2J\x1b]0;owned\x07b\nc.txt"]}
    monkeypatch.setattr(workspace_results, "WorkspaceService", StandInService)
    assert workspace_results.cmd_export(SimpleNamespace(id="ws", dir="d", json=False)) == 0
    out = capsys.readouterr().out
    assert "checkpoints/ab c.txt" in out and "\x1b" not in out and "\x07" not in out  # sequences removed


def _core_api(fake):
    from kubernetes import client
    return client.CoreV1Api(client.ApiClient(client.Configuration(host=fake.url)))


def test_a_cut_or_failed_checkpoint_stream_is_one_backend_error(fake, tmp_path):
    """The exec websocket is the stand-in's; reading and unpacking are the real code."""
    import pytest
    from core.errors import BackendError
    whole = base64.encodebytes(_tar([("./step_00000010/rank_0.pt", None, b"w" * 5000)]))
    for text, said in [(whole, "ended early"), (whole + f"{pod_files.SENTINEL} 2\n".encode(), "tar exited with 2"),
                       (f"{pod_files.SENTINEL} toobig 9999999\n".encode(), "larger than 2 GiB")]:
        fake.exec_output["p"] = [text]
        with pytest.raises(BackendError, match=said):
            pod_files.read_checkpoint_archive(_core_api(fake), "p", "default", "trainer")
    end = f"{pod_files.SENTINEL} 0\n".encode()
    for text in [whole.replace(b"\n", b"!", 1) + end, b"QQ==\nQUJD\n" + end, whole[:-2] + b"\n" + end]:
        fake.exec_output["p"] = [text]  # not base64, data past its padding, a group cut short
        with pytest.raises(BackendError, match="garbled"):
            pod_files.read_checkpoint_archive(_core_api(fake), "p", "default", "trainer")
    archive = _tar([("./step_00000010/rank_0.pt", None, b"w" * 5000)])
    for text, size in [(base64.b64encode(archive) + b"\n" + end, 1 << 20), (whole + end + b"\n\n", 7)]:
        fake.exec_output["p"] = [text[i:i + size] for i in range(0, len(text), size)]  # one line; tiny frames
        with pod_files.read_checkpoint_archive(_core_api(fake), "p", "default", "trainer", tmp_path) as got:
            assert got.read() == archive
    with pytest.raises(BackendError, match="cut short"):
        pod_files.unpack_checkpoints(io.BytesIO(archive[:1500]), tmp_path)
    assert not list(tmp_path.rglob("*.pt")) and not list(tmp_path.rglob("*.partial"))
