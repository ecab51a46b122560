"""Notifications (issue 43): the local supervisor, which sees a workspace recover, complete and fail,
POSTs each to the webhook kept in the secret store; the address is in no argv, log, history or
message, and the message carries no token. A real HTTP server on 127.0.0.1 (http.server) receives;
the supervisor is the real one, run as its own process, with a tiny worker program in place of
recipes.train (rank 1 fails its first attempt, then trains)."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from core.domain.notifications import URL_ENV, check_command, check_url, command_ref, message, secret_ref
from core.errors import InvalidInput
from core.state.secret_store import SecretStore
from tests.faults.faults import wait_for
from tests.tui import states

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "wandb-token-notify-0123456789abcdef0123"
HOOK_PATH = "/services/T0SECRET/B0SECRET/hook-credential-XYZ"  # a chat webhook's path is its credential
WORKER = ("import os, sys\n"
          "rank, run = os.environ['RANK'], os.environ['TORCHELASTIC_RESTART_COUNT']\n"
          "print('my key is', os.environ.get('WANDB_API_KEY'), flush=True)\n"
          "for step in (5, 10):\n"
          "    print(f'[rank {rank}] step {step}/10 loss 2.5', flush=True)\n"
          "if rank == '0':\n"
          "    os.makedirs('out', exist_ok=True)\n"
          "    open('out/metrics.jsonl', 'a').write('{\"step\": 10, \"loss\": 2.5}\\n')\n"
          "sys.exit(int(os.environ.get('FAIL_CODE', '3')) if rank == '1' and run == '0' else 0)\n")


class Hook:
    """A webhook on 127.0.0.1: keeps each POST's path and JSON body; answers `status` (and a
    Location to /elsewhere on a redirect)."""

    def __init__(self, status: int = 200) -> None:
        hook = self
        self.received: list[tuple[str, dict]] = []
        self.status = status

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hook.received.append((self.path, json.loads(body)))
                self.send_response(hook.status)
                if 300 <= hook.status < 400:
                    self.send_header("Location", "/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{HOOK_PATH}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():
    server = Hook()
    yield server
    server.close()


def run_supervisor(tmp_path: Path, url: str | None, budget: int, worker: str = WORKER, command: str | None = None,
                   **env) -> tuple[Path, int]:
    run_dir = tmp_path / "ws-note"
    (run_dir / "logs").mkdir(parents=True)
    secrets = SecretStore(tmp_path / "secrets.json")
    ref = secrets.put("ws-note/wandb", TOKEN)
    if url:
        secrets.put(secret_ref("ws-note"), url)
    if command:
        secrets.put(command_ref("ws-note"), command)
    (run_dir / "launch.json").write_text(json.dumps({
        "workspace_id": "ws-note", "mode": "group", "workers": 2, "max_recoveries": budget,
        "worker_argv": [sys.executable, "-c", worker], "env": {"PYTHONUNBUFFERED": "1", **env},
        "secret_refs": {"WANDB_API_KEY": ref}, "secrets_path": str(tmp_path / "secrets.json")}))
    done = subprocess.run([sys.executable, "-m", "core.backends.local.supervisor", str(run_dir)], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    return run_dir, done.returncode


def leaked(run_dir: Path, *secrets: str) -> list[str]:
    """Files of the run directory that hold any of the secrets."""
    return [str(p) for p in run_dir.rglob("*") if p.is_file() and any(s.encode() in p.read_bytes() for s in secrets)]


def test_recovered_then_completed_reach_the_webhook_and_the_address_stays_secret(tmp_path, hook):
    run_dir, code = run_supervisor(tmp_path, hook.url, budget=1)
    assert code == 0
    assert [(path, body["event"]) for path, body in hook.received] == [(HOOK_PATH, "RECOVERED"), (HOOK_PATH, "COMPLETED")]
    recovered, completed = (body for _, body in hook.received)
    assert recovered["workspace"] == "ws-note" and re.match(r"worker-[01] training again at step 5 after ", recovered["detail"])
    assert completed["detail"] == "step 10, loss 2.5000" and completed["text"].startswith("geotrain: workspace ws-note")
    bodies = json.dumps([body for _, body in hook.received])
    assert TOKEN not in bodies and "T0SECRET" not in bodies
    assert "my key is ***" in (run_dir / "logs" / "worker-1.log").read_text()
    assert leaked(run_dir, hook.url, HOOK_PATH, TOKEN) == []  # logs, history, phase, launch.json


def test_the_address_and_a_registry_password_in_the_users_shell_reach_no_worker(tmp_path, hook, monkeypatch):
    """`workspaces notify` reads the address from GEOTRAIN_NOTIFY_URL and a deploy the registry password
    from GEOTRAIN_REGISTRY_PASSWORD: a shell that exported them starts the supervisor with them, which
    must not hand them to the workers (their output is logged and only the tokens are redacted)."""
    monkeypatch.setenv(URL_ENV, hook.url)
    monkeypatch.setenv("GEOTRAIN_REGISTRY_PASSWORD", "registry-pw-Secret-77")
    shows_env = ("import os\nprint(sorted(os.environ.items()), flush=True)\n"
                 "print('[rank ' + os.environ['RANK'] + '] step 10/10 loss 2.5', flush=True)\n")
    run_dir, code = run_supervisor(tmp_path, hook.url, budget=0, worker=shows_env)
    assert code == 0 and "RANK" in (run_dir / "logs" / "worker-0.log").read_text()
    assert leaked(run_dir, HOOK_PATH, "registry-pw-Secret-77") == []


def test_a_run_that_gives_up_sends_failed_with_its_cause(tmp_path, hook):
    _, code = run_supervisor(tmp_path, hook.url, budget=0)
    assert code == 3
    (path, body), = hook.received
    assert body["event"] == "FAILED" and "worker-1 exited with code 3" in body["detail"] and "exit code 3" in body["detail"]


def test_without_an_address_nothing_is_sent(tmp_path, hook):
    run_dir, code = run_supervisor(tmp_path, None, budget=1)
    assert code == 0 and hook.received == []
    assert "notification" not in (run_dir / "logs" / "launcher.log").read_text()


def test_an_unreachable_webhook_is_one_line_without_the_address(tmp_path):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}{HOOK_PATH}"
    run_dir, code = run_supervisor(tmp_path, url, budget=0)
    assert code == 3  # the run's own outcome, whatever the webhook does
    lines = [ln for ln in (run_dir / "logs" / "launcher.log").read_text().splitlines() if "notification" in ln]
    assert lines == ["notification FAILED not delivered after 3 tries: ConnectionRefusedError: [Errno 111] "
                     "Connection refused"]
    assert leaked(run_dir, url, HOOK_PATH) == []


def test_a_redirect_is_not_followed(tmp_path):
    hook = Hook(status=302)
    try:
        run_dir, code = run_supervisor(tmp_path, hook.url, budget=0)
        assert [path for path, _ in hook.received] == [HOOK_PATH] * 3  # never /elsewhere
        assert "HTTP 302 (a redirect, not followed)" in (run_dir / "logs" / "launcher.log").read_text()
    finally:
        hook.close()


@pytest.mark.parametrize("url", ["", "ftp://host/x", "https:///nohost", "http://h/a b", "http://h/\x1b[2J", "x" * 3000])
def test_a_bad_address_is_one_line_that_does_not_repeat_it(url):
    with pytest.raises(InvalidInput) as error:
        check_url(url)
    assert (url[:20] not in str(error.value)) if url else True


def test_the_message_has_the_workspaces_words_only():
    body = message("ws-1", "FAILED", "worker-0 said \x1b]52;c;Zm9v\x07 boom", at=0)
    assert body == {"source": "geotrain", "workspace": "ws-1", "event": "FAILED", "detail": "worker-0 said  boom",
                    "at": "1970-01-01T00:00:00Z", "text": "geotrain: workspace ws-1 FAILED: worker-0 said  boom"}


def cli(*args, **env):
    return subprocess.run([sys.executable, "-m", "core.cli", "workspaces", "notify", *args], cwd=ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_the_notify_command_keeps_the_address_in_the_secret_store_only(geotrain_home, hook):
    _, procs = states.seed(geotrain_home, running=False)
    try:
        done = cli(states.COMPLETED_ID, "--test", **{URL_ENV: hook.url})
        assert done.returncode == 0, done.stderr
        assert [body["event"] for _, body in hook.received] == ["TEST"]
        assert hook.url not in done.stdout + done.stderr
        store = geotrain_home / "secrets.json"
        assert oct(store.stat().st_mode & 0o777) == "0o600" and hook.url in store.read_text()
        assert [p for p in geotrain_home.rglob("*") if p.is_file() and p != store
                and HOOK_PATH.encode() in p.read_bytes()] == []  # not in the database, history or logs
        again = cli(states.COMPLETED_ID, "--test")  # the kept address, without the variable
        assert again.returncode == 0 and len(hook.received) == 2
        assert cli(states.COMPLETED_ID, "--off").returncode == 0 and hook.url not in store.read_text()
        unset = cli(states.COMPLETED_ID)
        assert unset.returncode != 0 and f"{URL_ENV} is not set" in unset.stderr
        # a Kubernetes workspace's address goes to its cluster's Secret (tests/kubernetes/test_watcher_notify.py),
        # never this machine's store: this one's cluster has no kubeconfig, so it is refused in one line
        remote = cli(states.REMOTE_ID, **{URL_ENV: hook.url})
        assert remote.returncode != 0 and "has no kubeconfig" in remote.stderr and hook.url not in store.read_text()
        assert len(remote.stderr.strip().splitlines()) == 1 and HOOK_PATH not in remote.stderr
        command = cli(states.REMOTE_ID, "--command", "notify-send geotrain")  # it would run on this machine
        assert command.returncode != 0 and "a notification command would run on this machine" in command.stderr
        bad = cli(states.COMPLETED_ID, **{URL_ENV: "ftp://example.org" + HOOK_PATH})
        assert bad.returncode != 0 and HOOK_PATH not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    finally:
        states.stop(procs)


# a notification command: appends what it was given (argv, stdin, environment) as one JSON line
RECORDER = ("import json, os, sys\n"
            "with open(sys.argv[1], 'a') as out:\n"
            "    out.write(json.dumps({'argv': sys.argv[2:], 'stdin': json.loads(sys.stdin.read()),"
            " 'env': sorted(os.environ)}) + '\\n')\n")


def recorder(tmp_path: Path) -> tuple[str, Path]:
    script, out = tmp_path / "recorder.py", tmp_path / "got.jsonl"
    script.write_text(RECORDER)
    pwned = tmp_path / "pwned"
    return f"{sys.executable} {script} {out} 'one word; touch {pwned}' \"$HOME\" $(id)", out


def test_the_command_gets_each_event_on_stdin_without_a_shell_or_secrets(tmp_path, hook, monkeypatch):
    monkeypatch.setenv("GEOTRAIN_REGISTRY_PASSWORD", "registry-pw-Secret-77")
    command, out = recorder(tmp_path)
    run_dir, code = run_supervisor(tmp_path, hook.url, budget=1, command=command)
    assert code == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["stdin"]["event"] for g in got] == ["RECOVERED", "COMPLETED"]  # and the webhook as well:
    assert [body["event"] for _, body in hook.received] == ["RECOVERED", "COMPLETED"]
    assert got[1]["stdin"]["detail"] == "step 10, loss 2.5000" and got[1]["stdin"]["workspace"] == "ws-note"
    # the user's words, split as a shell would and run without one: nothing expanded or executed
    assert got[0]["argv"] == [f"one word; touch {tmp_path / 'pwned'}", "$HOME", "$(id)"]
    assert not (tmp_path / "pwned").exists()
    assert set(got[0]["env"]) <= {"PATH", "HOME", "LANG", "LC_CTYPE"}  # LC_CTYPE: Python's own C-locale coercion
    assert TOKEN not in out.read_text() and "registry-pw" not in out.read_text() and HOOK_PATH not in out.read_text()


def test_a_failing_command_is_one_line_without_its_words(tmp_path):
    fails = tmp_path / "fails.py"
    fails.write_text("import sys\nsys.stderr.write('cannot page with key ' + sys.argv[1] + '\\n')\nsys.exit(4)\n")
    run_dir, code = run_supervisor(tmp_path, None, budget=0, command=f"{sys.executable} {fails} pager-key-SECRET9")
    assert code == 3
    lines = [ln for ln in (run_dir / "logs" / "launcher.log").read_text().splitlines() if "notification" in ln]
    assert lines == ["notification command for FAILED failed: exit code 4: cannot page with key ***"]
    assert leaked(run_dir, "pager-key-SECRET9") == []


@pytest.mark.parametrize("text", ["", "   ", "prog 'unclosed", "prog\x1b[2J", "x" * 2000])
def test_a_bad_command_is_refused_in_one_line(text):
    with pytest.raises(InvalidInput) as error:
        check_command(text)
    assert len(str(error.value).splitlines()) <= 2 and (text.strip()[:10] not in str(error.value) if text.strip() else True)


def test_the_notify_command_stores_a_command_and_tests_it(geotrain_home, tmp_path):
    _, procs = states.seed(geotrain_home, running=False)
    try:
        command, out = recorder(tmp_path)
        done = cli(states.COMPLETED_ID, "--command", command, "--test")
        assert done.returncode == 0, done.stderr
        assert [json.loads(line)["stdin"]["event"] for line in out.read_text().splitlines()] == ["TEST"]
        store = geotrain_home / "secrets.json"
        kept = [shlex.split(v) for v in json.loads(store.read_text()).values()]
        assert shlex.split(command) in kept and oct(store.stat().st_mode & 0o777) == "0o600"
        missing = cli(states.COMPLETED_ID, "--command", "no-such-program-xyz --flag")
        assert missing.returncode != 0 and "not found" in missing.stderr
        assert cli(states.COMPLETED_ID, "--off").returncode == 0 and command not in store.read_text()
    finally:
        states.stop(procs)


def test_a_relative_program_is_kept_as_the_one_checked(geotrain_home, tmp_path, monkeypatch):
    """Found in review: `./n.sh` was checked in the CLI's directory but run in the run's directory,
    which the workers can write: the program is now kept as the absolute path found when it was set."""
    from core.backends.local import notifier

    here, run_dir = tmp_path / "here", tmp_path / "run"
    here.mkdir()
    run_dir.mkdir()
    said = tmp_path / "said"
    (here / "n.sh").write_text(f"#!/bin/sh\ncat > {said}\n")
    (here / "n.sh").chmod(0o700)
    (run_dir / "n.sh").write_text(f"#!/bin/sh\necho planted > {said}\n")  # what a worker could plant
    (run_dir / "n.sh").chmod(0o700)
    monkeypatch.chdir(here)
    store = SecretStore()
    notifier.keep(store, "ws-rel", command="./n.sh --flag")
    kept = shlex.split(store.get(command_ref("ws-rel")))
    assert kept == [str(here / "n.sh"), "--flag"]
    assert notifier.run_command(kept, {"event": "TEST"}, run_dir) == ""
    assert json.loads(said.read_text()) == {"event": "TEST"}  # the checked program ran, not the planted one
    assert "absolute" in notifier.run_command(["./n.sh"], {"event": "TEST"}, run_dir)  # one kept before


def test_a_command_past_its_time_is_ended_with_what_it_started(tmp_path, monkeypatch):
    from core.backends.local import notifier

    monkeypatch.setattr(notifier, "TIMEOUT_S", 1)
    pid_file = tmp_path / "child.pid"
    code = (f"import subprocess, time; p = subprocess.Popen(['sleep', '60']); "
            f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    assert notifier.run_command([sys.executable, "-c", code], {"event": "TEST"}, tmp_path) == \
        "it did not finish within 1 s"
    stat = Path(f"/proc/{int(pid_file.read_text())}/stat")

    def ended() -> bool:  # gone, or a zombie left to a PID 1 that does not reap
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except (OSError, IndexError):
            return True
    wait_for(ended, 10, "the command's background child ended with it")
