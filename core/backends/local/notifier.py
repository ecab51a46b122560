"""The local supervisor's notifications: it sees a workspace complete, fail and recover, so it is the
one that tells the webhook (core.domain.notifications). The address is read from the secret store
when a message goes out (set or changed at any time with `workspaces notify`), POSTed as JSON with
urllib, never following a redirect (the address's own path may be its credential; a redirect could
carry the request elsewhere); a failure to deliver is one line in logs/launcher.log that names the
event and why, never the address. A notification command (core.domain.notifications.check_command) runs
without a shell, its argv the user's words, the message as JSON on stdin, in an environment of PATH,
HOME and LANG only (none of the workspace's or the user's secrets), with a time limit."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from core.domain.notifications import check_command, check_url, command_ref, mask_url, message, secret_ref
from core.errors import GeotrainError, InvalidInput
from core.state.secret_store import SecretStore, redact

TIMEOUT_S = 10
ATTEMPTS = 3


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # the 3xx becomes an HTTPError: the message goes nowhere else


_OPENER = urllib.request.build_opener(_NoRedirect)


def post(url: str, body: dict) -> str:
    """POST the body; '' when the server took it (2xx), else why not, in words without the address."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "geotrain"})
    try:
        with _OPENER.open(request, timeout=TIMEOUT_S) as response:
            return "" if 200 <= response.status < 300 else f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}" + (" (a redirect, not followed)" if 300 <= exc.code < 400 else "")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{type(reason).__name__}: {str(reason)[:120]}"


def keep(store: SecretStore, workspace_id: str, url: str | None = None, command: str | None = None) -> None:
    """Check, then keep what is given (None: leave as it is); both checked before either is kept."""
    argv = check_command(command) if command is not None else None
    program = shutil.which(argv[0]) if argv else None
    if argv and program is None:
        raise InvalidInput(f"the notification command's program {argv[0]!r} is not found or not executable",
                           "give its full path, or a program on PATH")
    if argv:  # kept as the absolute program found now: it runs in the run's directory, in the workers' reach
        command = shlex.join([os.path.abspath(program), *argv[1:]])
    if url is not None:
        check_url(url)
    if url is not None:
        store.put(secret_ref(workspace_id), url)
    if command is not None:
        store.put(command_ref(workspace_id), command)


def forget(store: SecretStore, workspace_id: str) -> None:
    store.delete_prefix(secret_ref(workspace_id))  # '<id>/notify' and '<id>/notify-command'


def shown(store: SecretStore, workspace_id: str) -> tuple[str | None, str | None]:
    """What may be shown of what is kept: the address masked, the command's program name only."""
    url, command = store.get(secret_ref(workspace_id)), store.get(command_ref(workspace_id))
    try:
        program = os.path.basename(check_command(command)[0]) if command else None
    except GeotrainError:
        program = "(unreadable)"
    return (mask_url(url) if url else None), program


def command_env() -> dict[str, str]:
    """What a notification command inherits: where programs are and the user's home, nothing else."""
    return {"PATH": os.environ.get("PATH") or os.defpath, "HOME": os.path.expanduser("~"), "LANG": "C.UTF-8"}


def run_command(argv: list[str], body: dict, cwd: Path) -> str:
    """Run it with the message on stdin; '' when it exits 0, else why not (its last stderr line)."""
    if "/" in argv[0] and not os.path.isabs(argv[0]):  # kept before programs were kept absolute
        return f"its program {argv[0]!r} is not an absolute path: set the command again"
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, env=command_env(), cwd=cwd, start_new_session=True, errors="replace")
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    try:
        _, err = proc.communicate(json.dumps(body), timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return f"it did not finish within {TIMEOUT_S} s"
    if proc.returncode == 0:
        return ""
    last = (err.strip().splitlines() or [""])[-1][:200]
    return f"exit code {proc.returncode}" + (f": {last}" if last else "")


def _kill_group(proc: subprocess.Popen) -> None:
    """The command and whatever it started in its session (a `cmd &` would outlive it and hold its pipe)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    proc.communicate()


class Notifier:
    def __init__(self, run_dir: Path, workspace_id: str, store: SecretStore, secrets: list[str]) -> None:
        self.run_dir, self.workspace_id, self.store, self.secrets = run_dir, workspace_id, store, secrets
        self.pending: list[threading.Thread] = []
        self.recovering = False

    def send(self, event: str, detail: str) -> bool:
        """Tell the webhook and run the command, those the workspace has; False when it has neither or
        none delivered."""
        command = self.store.get(command_ref(self.workspace_id))
        delivered = self._run(event, detail, command) if command else False
        return self._post(event, detail, [command] if command else []) or delivered

    def _run(self, event: str, detail: str, command: str) -> bool:
        try:
            argv = check_command(command)
        except GeotrainError as exc:
            self._log(f"notification command for {event} not run: {exc.message}")
            return False
        body = message(self.workspace_id, event, redact(detail, [*self.secrets, command, *argv[1:]]))
        why = run_command(argv, body, self.run_dir)
        if why:
            self._log(f"notification command for {event} failed: {redact(why, [command, *argv[1:]])}")
        return not why

    def _post(self, event: str, detail: str, more_secrets: list[str]) -> bool:
        try:
            url = self.store.get(secret_ref(self.workspace_id))
            if not url:
                return False
            check_url(url)
        except GeotrainError as exc:
            self._log(f"notification {event} not sent: {exc.message}")
            return False
        body = message(self.workspace_id, event, redact(detail, [*self.secrets, *more_secrets, url]))
        why = ""
        for attempt in range(ATTEMPTS):
            if attempt:
                time.sleep(2 ** (attempt - 1))
            why = post(url, body)
            if not why:
                return True
        self._log(f"notification {event} not delivered after {ATTEMPTS} tries: {redact(why, [url])}")
        return False

    def on_record(self, record: dict) -> None:
        """A history record (RunHistory.listeners): the first worker training again after a recovery
        is RECOVERED (once per recovery: a group's every worker reports). Sent from a thread of its
        own: this runs on a worker's output pump, which must never wait on the network."""
        if record.get("kind") == "recovery":
            self.recovering = True
        elif record.get("kind") == "recovered" and self.recovering:
            self.recovering = False
            detail = (f"{record.get('worker')} training again at step {record.get('step')} after "
                      f"{record.get('downtime_s')}s ({record.get('steps_lost')} steps lost)")
            thread = threading.Thread(target=self.send, args=("RECOVERED", detail), daemon=True)
            thread.start()
            self.pending.append(thread)

    def finished(self, code: int, cause: str) -> None:
        """The run ended: COMPLETED or FAILED, after any RECOVERED still on its way (so they arrive in order)."""
        for thread in self.pending:
            thread.join(timeout=ATTEMPTS * (TIMEOUT_S + 4))
        if code == 0:
            self.send("COMPLETED", cause)
        else:
            self.send("FAILED", cause or f"exit code {code}")

    def _log(self, line: str) -> None:
        with open(self.run_dir / "logs" / "launcher.log", "a") as log:
            log.write(line + "\n")
