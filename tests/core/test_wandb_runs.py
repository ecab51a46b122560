"""W&B as users expect: a project per workspace, the run's whereabouts in `workspaces show`,
and `workspaces sync ID` uploading an offline run with a key from the environment.

The offline run is a real one (recipes.telemetry with wandb in offline mode); the sync runs
the real `wandb sync` against a local HTTP stand-in for the W&B server (WANDB_BASE_URL) that
records what it was sent and refuses the key: a successful upload (W&B's GraphQL and file
store) is not stood in for, so the success path is covered only by the argv/env check."""

import base64
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from core.backends import wandb_runs
from core.domain.records import WorkspaceSpec
from core.errors import BackendError, InvalidInput
from core.schema.training_config import config_errors
from core.state.store import Store
from core.workspaces import DeployRequest, WorkspaceService

ROOT = Path(__file__).resolve().parents[2]
KEY = "0123456789abcdef0123456789abcdef01234567"
WS_ID = "gpt-neo-abc123"


def test_each_workspace_gets_its_own_project_unless_the_config_names_one(geotrain_home):
    service = WorkspaceService()
    spec = service.build_spec(DeployRequest(steps=5))
    assert spec.config["logging"]["wandb_project"] is None
    workspace_id, plan = service.plan(spec)
    assert f"wandb_project: geotrain-{workspace_id}" in plan.config_yaml
    named = service.build_spec(DeployRequest(steps=5, sets=("logging.wandb_project=team-runs",)))
    _, plan = service.plan(named)
    assert "wandb_project: team-runs" in plan.config_yaml
    assert config_errors({**named.config, "logging": {**named.config["logging"], "wandb_project": None}}) == []


# rank 0's telemetry with W&B on, logging one step (the run's out_dir is argv[1])
TELEMETRY_RUN = ("import sys; from pathlib import Path; from recipes.telemetry import Telemetry\n"
                 "t = Telemetry(rank=0, out_dir=Path(sys.argv[1]), config={'steps': 2}, wandb_on=True,"
                 f" project='geotrain-{WS_ID}', entity=None, run_name='r')\n"
                 "t.log({'step': 1, 'loss': 2.5}); t.close()\n")


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory):
    """A real offline W&B run written by the recipe's telemetry (rank 0)."""
    out = tmp_path_factory.mktemp("ws") / "out"
    env = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    done = subprocess.run([sys.executable, "-c", TELEMETRY_RUN, str(out)], cwd=ROOT,
                          env=dict(env, WANDB_MODE="offline"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "upload it later with: wandb sync " in done.stdout
    return out


def _seed_workspace(home: Path, out: Path) -> None:
    run_dir = home / "workspaces" / WS_ID
    (run_dir / "logs").mkdir(parents=True)
    shutil.copytree(out, run_dir / "out", symlinks=True)  # the real run's files, made once for the module
    run_file = run_dir / "out" / "wandb_run.json"  # where the run would have written it
    written = json.loads(run_file.read_text())
    written["sync_dir"] = written["sync_dir"].replace(str(out), str(run_dir / "out"), 1)
    run_file.write_text(json.dumps(written))
    (run_dir / "exit_code").write_text("0")
    spec = WorkspaceSpec(cluster="local", model="gpt-neo", size="tiny", preset="medium", workers=1, steps=2,
                         config={"logging": {"wandb": True, "wandb_project": f"geotrain-{WS_ID}"}})
    with Store().write() as conn:
        conn.execute("INSERT INTO workspaces(id, cluster, spec, status, run_dir, created_at, updated_at)"
                     " VALUES (?,?,?,?,?,?,?)", (WS_ID, "local", json.dumps(spec.to_dict()), "COMPLETED",
                                                 str(run_dir), 1.0, 1.0))


def test_show_names_the_offline_run_and_the_exact_sync_command(offline_run, geotrain_home):
    _seed_workspace(geotrain_home, offline_run)
    info = WorkspaceService().wandb_run(WS_ID)
    assert info["mode"] == "offline" and info["project"] == f"geotrain-{WS_ID}"
    sync_dir = Path(info["sync_dir"])
    assert sync_dir.parent == geotrain_home / "workspaces" / WS_ID / "out" / "wandb"
    assert list(sync_dir.glob("run-*.wandb"))
    assert info["sync_command"] == f"wandb sync {sync_dir}"
    out = subprocess.run([sys.executable, "-m", "core.cli", "workspaces", "show", WS_ID], cwd=ROOT,
                         env=dict(os.environ), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"`wandb sync {sync_dir}`" in out.stdout and f"`geotrain workspaces sync {WS_ID}`" in out.stdout


class _WandbStandIn(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append((self.path, self.headers.get("Authorization"), body))
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"errors": [{"message": "invalid api key"}]}')

    do_GET = do_POST

    def log_message(self, *args):
        pass


def test_sync_hands_the_key_to_wandb_through_the_environment(offline_run, geotrain_home):
    _seed_workspace(geotrain_home, offline_run)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _WandbStandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = dict(os.environ, WANDB_API_KEY=KEY, WANDB_BASE_URL=f"http://127.0.0.1:{server.server_port}")
        out = subprocess.run([sys.executable, "-m", "core.cli", "workspaces", "sync", WS_ID], cwd=ROOT,
                             env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "wandb sync failed" in out.stderr and "401" in out.stderr and KEY not in out.stdout + out.stderr
    graphql = [s for s in _WandbStandIn.seen if s[0] == "/graphql"]
    assert graphql, _WandbStandIn.seen
    assert graphql[0][1] == "Basic " + base64.b64encode(f"api:{KEY}".encode()).decode()  # the key reached W&B
    assert info_id(offline_run).encode() in graphql[0][2]  # asking about this run of this project
    assert f"geotrain-{WS_ID}".encode() in graphql[0][2]


def info_id(out: Path) -> str:
    return json.loads((out / "wandb_run.json").read_text())["id"]


def test_sync_command_never_carries_the_key_in_argv(offline_run):
    """A recording stand-in for subprocess.run (the real call is the test above)."""
    calls = []

    def record(argv, **kwargs):
        calls.append((argv, kwargs["env"]))
        return subprocess.CompletedProcess(argv, 0, "wandb: Syncing... done.\n", "")

    info = wandb_runs.describe({"wandb_run.json": offline_run / "wandb_run.json", "wandb": offline_run / "wandb"},
                               {"logging": {"wandb_project": "p"}})
    wandb_runs.sync(info, KEY, run=record)
    [(argv, env)] = calls
    assert argv[-2:] == ["--", info["sync_dir"]] and "--project" in argv and KEY not in " ".join(argv)
    assert env["WANDB_API_KEY"] == KEY and "WANDB_MODE" not in env
    with pytest.raises(InvalidInput, match="no W&B API key"):
        wandb_runs.sync(info, None, run=record)
    with pytest.raises(InvalidInput, match="no offline W&B run"):
        wandb_runs.sync({"mode": "online", "url": "https://wandb.ai/x"}, KEY, run=record)

    def refused(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 0, "", f"wandb: ERROR key {KEY} refused\n")
    with pytest.raises(BackendError) as caught:
        wandb_runs.sync(info, KEY, run=refused)
    assert KEY not in str(caught.value) and "***" in str(caught.value)


    def too_slow(argv, **kwargs):
        raise subprocess.TimeoutExpired(argv, kwargs["timeout"])
    with pytest.raises(BackendError, match="did not finish"):
        wandb_runs.sync(info, KEY, run=too_slow)


def test_a_workspace_cannot_point_sync_at_another_workspaces_run(offline_run, tmp_path):
    """wandb_run.json is written by the workspace's own process: its sync_dir must lie inside
    that workspace's wandb folder (no link on the way) and its project is not taken."""
    other = tmp_path / "other" / "out"
    (other / "wandb").mkdir(parents=True)
    planted = json.loads((offline_run / "wandb_run.json").read_text())  # B's run, named by A
    (other / "wandb_run.json").write_text(json.dumps({**planted, "project": "victims-project"}))
    files = {"wandb_run.json": other / "wandb_run.json", "wandb": other / "wandb"}
    info = wandb_runs.describe(files, {"logging": {"wandb_project": "geotrain-a"}})
    assert "sync_dir" not in info and info["project"] == "geotrain-a"
    assert "outside its wandb folder; not synced" in wandb_runs.summary(info, "a")
    with pytest.raises(InvalidInput, match="not inside this workspace's wandb folder"):
        wandb_runs.sync(info, KEY, run=lambda *a, **k: pytest.fail("wandb sync ran"))
    (other / "wandb" / "linked").symlink_to(Path(planted["sync_dir"]))  # a link inside its own folder
    (other / "wandb_run.json").write_text(json.dumps({**planted, "sync_dir": str(other / "wandb" / "linked")}))
    assert "sync_dir" not in wandb_runs.describe(files, {"logging": {}})


def test_the_run_file_is_read_bounded_and_never_through_a_link(tmp_path, monkeypatch):
    """The pod writes wandb_run.json: an oversized one, or a link (even one swapped in after
    the check), gives no run fields and is read no further than the limit."""
    config = {"logging": {"wandb_project": "p"}}
    run_file = tmp_path / "wandb_run.json"
    run_file.write_text(json.dumps({"mode": "online", "url": "https://wandb.ai/a/b"}))
    assert wandb_runs.describe({"wandb_run.json": run_file}, config)["url"] == "https://wandb.ai/a/b"

    big = tmp_path / "big.json"
    big.write_text(json.dumps({"mode": "online", "url": "u", "pad": "x" * (2 * wandb_runs.MAX_RUN_FILE)}))
    reads = []
    real_fdopen = os.fdopen

    def recording(fd, *args, **kwargs):
        handle = real_fdopen(fd, *args, **kwargs)
        real_read = handle.read
        handle.read = lambda n=-1: reads.append(n) or real_read(n)
        return handle
    monkeypatch.setattr(wandb_runs.os, "fdopen", recording)
    assert "url" not in wandb_runs.describe({"wandb_run.json": big}, config)
    assert reads == [wandb_runs.MAX_RUN_FILE + 1]
    monkeypatch.undo()

    secret = tmp_path / "elsewhere.json"
    secret.write_text(json.dumps({"mode": "online", "url": "https://leak"}))
    link = tmp_path / "link.json"
    link.symlink_to(secret)
    assert "url" not in wandb_runs.describe({"wandb_run.json": link}, config)
    monkeypatch.setattr(Path, "is_symlink", lambda self: False)  # the link swapped in after the check
    assert wandb_runs._read_small_json(link) == {}


@pytest.mark.parametrize("server", ["nothing listening", "refusing the key"])
def test_a_key_that_gets_no_online_run_logs_offline_for_a_later_sync(tmp_path, server):
    """A worker with a key whose online start fails (no route: here a port nothing listens on; a W&B
    server (stand-in) refusing the key) logs offline, kept for `wandb sync`, within
    logging.wandb_init_timeout, instead of waiting out wandb's 90 s and then logging nothing."""
    with socket.socket() as closed:  # bound, never listening: connections are refused, and no one else takes the port
        closed.bind(("127.0.0.1", 0))
        handler = type("_OwnStandIn", (_WandbStandIn,), {"seen": []})  # its own record: other tests read theirs
        stand_in = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=stand_in.serve_forever, daemon=True).start()
        port = closed.getsockname()[1] if server == "nothing listening" else stand_in.server_port
        out = tmp_path / "out"
        env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}
        env.update(WANDB_API_KEY=KEY, WANDB_BASE_URL=f"http://127.0.0.1:{port}")
        try:
            done = subprocess.run([sys.executable, "-c", TELEMETRY_RUN.replace("run_name='r'", "run_name='r', "
                                                                                "wandb_init_timeout=5"), str(out)],
                                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        finally:
            stand_in.shutdown()
    assert done.returncode == 0, done.stderr[-2000:]
    if server == "refusing the key":  # the online attempt reached the server with the key
        assert ("Basic " + base64.b64encode(f"api:{KEY}".encode()).decode()) in {auth for _, auth, _ in handler.seen}
    said = [line for line in done.stdout.splitlines() if "W&B online failed" in line]
    assert len(said) == 1 and said[0].endswith("; logging offline instead, to upload later"), done.stdout
    assert "continuing without it" not in done.stdout and KEY not in done.stdout + done.stderr
    info = json.loads((out / "wandb_run.json").read_text())
    assert info["mode"] == "offline" and info["url"] is None
    assert list(Path(info["sync_dir"]).glob("run-*.wandb"))
    assert f"upload it later with: wandb sync {info['sync_dir']}" in done.stdout


@pytest.mark.parametrize("mode", ["dryrun", "disabled"])
def test_wandbs_other_modes_are_recorded_as_what_they_are(tmp_path, mode):
    """WANDB_MODE=dryrun is wandb's older name for offline: the run is recorded as offline, with its sync
    command (it was recorded as online, with no URL and nothing to sync). WANDB_MODE=disabled leaves no run
    to record or sync: one line says so and metrics.jsonl still gets every record."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    done = subprocess.run([sys.executable, "-c", TELEMETRY_RUN, str(out)], cwd=ROOT,
                          env=dict(env, WANDB_MODE=mode), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [2.5]
    if mode == "dryrun":
        info = json.loads((out / "wandb_run.json").read_text())
        assert info["mode"] == "offline" and info["url"] is None and Path(info["sync_dir"]).is_dir()
        assert f"upload it later with: wandb sync {info['sync_dir']}" in done.stdout
    else:
        assert not (out / "wandb_run.json").exists() and "W&B run" not in done.stdout
        assert "W&B is disabled here (WANDB_MODE or wandb's settings); logging to metrics.jsonl only" in done.stdout


def test_every_offline_start_of_a_run_is_uploaded_oldest_first(tmp_path):
    """A restart (torchrun's, or a recovery) continues the run id in a new offline folder, and
    wandb_run.json names only the newest: `sync` hands wandb every folder of the run, oldest first,
    also when the latest start came online (its history went up live; the earlier ones did not)."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    for _ in range(2):  # the first start, then a restart into the same out_dir
        done = subprocess.run([sys.executable, "-c", TELEMETRY_RUN, str(out)], cwd=ROOT,
                              env=dict(env, WANDB_MODE="offline"), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
    run_id = info_id(out)
    folders = sorted(str(p) for p in (out / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(folders) == 2 and json.loads((out / "wandb_run.json").read_text())["sync_dir"].endswith(
        Path(folders[1]).name)  # the file names the newest only
    (out / "wandb" / "offline-run-20260101_000000-someoneelse").mkdir()  # another run's folder: not this run
    files = {"wandb_run.json": out / "wandb_run.json", "wandb": out / "wandb"}
    info = wandb_runs.describe(files, {"logging": {"wandb_project": "p"}})
    assert info["sync_dirs"] == folders and info["sync_command"] == "wandb sync " + " ".join(folders)
    assert wandb_runs.summary(info, "w") == (f"W&B: offline run in 2 folders, one per start, the newest {folders[1]} "
                                            "(project p); upload it with `geotrain workspaces sync w`")
    calls = []
    wandb_runs.sync(info, KEY, run=lambda argv, **kw: calls.append(argv) or subprocess.CompletedProcess(argv, 0, "", ""))
    assert calls[0][-3:] == ["--", *folders]

    written = json.loads((out / "wandb_run.json").read_text())  # a third start came online
    (out / "wandb_run.json").write_text(json.dumps({**written, "mode": "online", "url": "https://wandb.ai/t/p/runs/x"}))
    info = wandb_runs.describe(files, {"logging": {"wandb_project": "p"}})
    assert info["url"] == "https://wandb.ai/t/p/runs/x" and info["sync_dirs"] == folders
    assert wandb_runs.summary(info, "w", short=True) == \
        "W&B: https://wandb.ai/t/p/runs/x; 2 offline parts: geotrain workspaces sync w"
    (Path(folders[0]) / f"run-{run_id}.wandb.synced").write_text("")  # wandb sync uploaded the first part
    info = wandb_runs.describe(files, {"logging": {"wandb_project": "p"}})
    assert wandb_runs.summary(info, "w") == ("W&B: https://wandb.ai/t/p/runs/x; 1 offline part of it (starts that "
                                            "logged offline) still to upload: `geotrain workspaces sync w`")
    (Path(folders[1]) / f"run-{run_id}.wandb.synced").symlink_to(Path(folders[0]) / f"run-{run_id}.wandb.synced")
    assert "1 offline part of it" in wandb_runs.summary(wandb_runs.describe(files, {"logging": {}}), "w")
    (Path(folders[1]) / f"run-{run_id}.wandb.synced").unlink()  # a link is no marker; a file is
    (Path(folders[1]) / f"run-{run_id}.wandb.synced").write_text("")
    assert wandb_runs.summary(wandb_runs.describe(files, {"logging": {}}), "w") == "W&B: https://wandb.ai/t/p/runs/x"
    calls.clear()
    wandb_runs.sync(info, KEY, run=lambda argv, **kw: calls.append(argv) or subprocess.CompletedProcess(argv, 0, "", ""))
    assert calls[0][-3:] == ["--", *folders]
    (out / "wandb" / "linked").symlink_to(folders[0])  # a folder reached through a link is not the run's
    (out / "wandb" / f"offline-run-20260101_000000-{run_id}").symlink_to(folders[0])
    assert wandb_runs.describe(files, {"logging": {}})["sync_dirs"] == folders
