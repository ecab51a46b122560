"""SSH to the servers: one lazy `Connection` with pinned host keys, run/put and retries.

The module that imports paramiko (with its part ssh_sftp.py); what
callers name without a connection (errors, callback types) is in ssh_errors.py. Host keys
are checked against geotrain's own known_hosts (core.nodes.known_hosts): an unknown key is
shown and must be confirmed (a callback, or a fingerprint given in advance); a changed key
is refused.
"""

from __future__ import annotations

import io
import re
import secrets
import select
import shlex
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko

from core.errors import InvalidInput
from core.schema.endpoints import parse_endpoint  # noqa: F401 - re-exported: callers import it here
from core.nodes.known_hosts import KnownHosts, fingerprint, host_label, route_label
from core.nodes.ssh_sftp import PRIVATE_MODE, create_private, install_command, remove_quietly, write_payload
from core.nodes.ssh_errors import (  # noqa: F401 - re-exported: callers import them here
    AskPassphrase, AuthFailed, CommandTimeout, ConfirmHostKey, HostKeyError, SSHError, Unreachable)


@dataclass
class RunResult:
    command: str
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class KeyRing:
    """Private keys loaded once per path (asking for a passphrase when encrypted)."""

    def __init__(self, ask_passphrase: AskPassphrase | None = None) -> None:
        self._ask = ask_passphrase
        self._keys: dict[str, paramiko.PKey] = {}
        self._lock = threading.Lock()

    def load(self, key_path: str) -> paramiko.PKey:
        path = str(Path(key_path).expanduser())
        with self._lock:
            if path not in self._keys:
                self._keys[path] = self._load(path)
            return self._keys[path]

    def _load(self, path: str) -> paramiko.PKey:
        if not Path(path).is_file():
            raise InvalidInput(f"SSH key {path} does not exist",
                               "give the path of a private key (e.g. ~/.ssh/id_ed25519)")
        try:
            return paramiko.PKey.from_path(path)
        except (paramiko.PasswordRequiredException, TypeError):
            pass  # encrypted (paramiko raises TypeError for OpenSSH-format keys)
        except (paramiko.SSHException, ValueError, OSError) as exc:
            raise InvalidInput(f"cannot read SSH key {path}: {exc}",
                               "give the private key file, not the .pub") from None
        passphrase = self._ask(path) if self._ask else None
        if not passphrase:
            raise AuthFailed(f"SSH key {path} is encrypted and no passphrase was given",
                             f"run in a terminal to type it, or `ssh-add {path}` and "
                             "leave out --ssh-key-path to use the SSH agent")
        try:
            return paramiko.PKey.from_path(path, password=passphrase.encode())
        except (paramiko.SSHException, ValueError, TypeError):
            raise AuthFailed(f"cannot unlock SSH key {path}: wrong passphrase",
                             "type the key's passphrase again") from None


class PinnedHostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Check the server's key against our pins (the client itself holds none).

    Unknown key: trusted when its fingerprint is in `trusted`, else when `confirm` says
    so; a changed key is trusted only when its new fingerprint was given in `trusted`.
    """

    def __init__(self, known: KnownHosts, trusted: set[str], confirm: ConfirmHostKey | None,
                 jump: tuple[str, int] | None = None) -> None:
        self.known, self.trusted, self.confirm, self.jump = known, trusted, confirm, jump

    def _pinned(self, label: str, host: str, offered: tuple[str, str]) -> list[tuple[str, str]]:
        """The keys pinned for `label`; a jumped host's older pin under its bare name
        counts only when it holds the offered key (it is then moved to the new name)."""
        pinned = self.known.lookup(label)
        if not pinned and self.jump and offered in self.known.lookup(host):
            self.known.pin(label, *offered)
            return [offered]
        return pinned

    def missing_host_key(self, client, hostname, key) -> None:
        # paramiko names it as OpenSSH does: host, or [host]:port; a jump host prefixes it
        label = route_label(hostname, self.jump)
        offered = (key.get_name(), key.get_base64())
        fp = fingerprint(key.asbytes())
        pinned = self._pinned(label, hostname, offered)
        if offered in pinned:
            return
        if pinned:
            if fp in self.trusted:
                self.known.pin(label, *offered)
                return
            raise HostKeyError(
                f"HOST KEY CHANGED for {label}: it now offers {key.get_name()} {fp}, "
                f"which is not the key pinned in {self.known.path} — refusing to connect",
                "this can be an attack; if the server was legitimately reinstalled, check "
                f"the new fingerprint with its admin and retry with --trust-host-key {fp}")
        if self.trusted and fp not in self.trusted:
            raise HostKeyError(
                f"{label} offers host key {fp}, not one given with --trust-host-key",
                "check it on the server (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`); "
                f"if it is that server's key, add --trust-host-key {fp}")
        if fp in self.trusted or (self.confirm and self.confirm(label, key.get_name(), fp)):
            self.known.pin(label, *offered)
            return
        raise HostKeyError(
            f"the host key of {label} ({key.get_name()} {fp}) is not trusted yet",
            f"check it on the server and pass --trust-host-key {fp}, or run interactively")


def _transient(exc: BaseException) -> bool:
    """A drop worth retrying (reset, closed mid-handshake), not a definite refusal."""
    if isinstance(exc, (SSHError, paramiko.AuthenticationException, paramiko.BadHostKeyException)):
        return False
    if isinstance(exc, (EOFError, ConnectionResetError)):
        return True
    if isinstance(exc.__context__, (socket.timeout, TimeoutError)):
        return False  # a server that said nothing in time: retrying only waits longer
    text = str(exc).lower()
    return isinstance(exc, paramiko.SSHException) and ("banner" in text or "reset" in text)


class Connection:
    """A lazy SSH connection to one server: `run()`, `put()`, reconnect on drops."""

    def __init__(self, host: str, port: int = 22, username: str = "root", *,
                 key_path: str | None = None, jump: str | None = None,
                 keys: KeyRing | None = None, known_hosts: KnownHosts | None = None,
                 trusted: set[str] | None = None, confirm: ConfirmHostKey | None = None,
                 connect_timeout: float = 10.0, retries: int = 2) -> None:
        self.host, self.port, self.username = host, port, username
        self.key_path, self.jump = key_path, jump
        self.keys = keys or KeyRing()
        self.known_hosts = known_hosts or KnownHosts()
        self.trusted, self.confirm = set(trusted or ()), confirm
        self.connect_timeout, self.retries = connect_timeout, retries
        self._clients: list[paramiko.SSHClient] = []

    @property
    def label(self) -> str:
        return f"{self.username}@{host_label(self.host, self.port)}"

    # connecting ---------------------------------------------------------------
    def _client(self, host: str, port: int, user: str, sock=None,
                jump: tuple[str, int] | None = None) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(
            PinnedHostKeyPolicy(self.known_hosts, self.trusted, self.confirm, jump))
        pkey = self.keys.load(self.key_path) if self.key_path else None
        try:
            client.connect(host, port, user, pkey=pkey, sock=sock, timeout=self.connect_timeout,
                           banner_timeout=self.connect_timeout, auth_timeout=self.connect_timeout,
                           allow_agent=pkey is None, look_for_keys=False)
        except BaseException:
            client.close()
            raise
        return client

    def _open(self) -> paramiko.SSHClient:
        sock, via = None, None
        if self.jump:
            juser, jhost, jport = parse_endpoint(self.jump, self.username)
            jump = self._client(jhost, jport, juser)
            self._clients.append(jump)
            sock = jump.get_transport().open_channel(
                "direct-tcpip", (self.host, self.port), ("127.0.0.1", 0),
                timeout=self.connect_timeout)
            via = (jhost, jport)
        client = self._client(self.host, self.port, self.username, sock, via)
        self._clients.append(client)
        return client

    def _translate(self, exc: BaseException) -> SSHError:
        where = f"{self.label}" + (f" (via {self.jump})" if self.jump else "")
        if isinstance(exc, SSHError):
            return exc
        if isinstance(exc, paramiko.ChannelException) and self.jump:
            return Unreachable(f"{where}: the jump host cannot reach {self.host}:{self.port} "
                               f"({exc.text or exc})", "check the address as seen from the jump host")
        if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) and exc.errors:
            exc = next(iter(exc.errors.values()))
        if isinstance(exc, paramiko.AuthenticationException):
            how = f"key {self.key_path}" if self.key_path else "the SSH agent's keys"
            return AuthFailed(f"{where}: authentication failed for user {self.username!r} with {how}",
                              "check --username, and that the key's .pub is in that user's "
                              "~/.ssh/authorized_keys")
        if "no authentication methods" in str(exc).lower():
            return AuthFailed(f"{where}: no key to log in with (no --ssh-key-path, no SSH agent)",
                              "give --ssh-key-path, or start ssh-agent and `ssh-add` your key")
        if isinstance(exc, ConnectionRefusedError) or "refused" in str(exc).lower():
            return Unreachable(f"{where}: connection refused — no SSH server on port {self.port}",
                               "check the port in --endpoint HOST:PORT and that sshd runs")
        # "No existing session": the handshake wait ran out before the server spoke
        if isinstance(exc, (socket.timeout, TimeoutError)) or \
                isinstance(exc.__context__, (socket.timeout, TimeoutError)) or \
                "no existing session" in str(exc).lower():
            return Unreachable(f"{where}: no answer within {self.connect_timeout:g}s",
                               "check the address, that the server is up and that a "
                               "firewall lets SSH through")
        if isinstance(exc, socket.gaierror):
            return Unreachable(f"{where}: unknown host name {self.host!r}", "check the address")
        if isinstance(exc, OSError) and not isinstance(exc, paramiko.SSHException):
            return Unreachable(f"{where}: cannot connect: {exc.strerror or exc}",
                               "check the address and the network path to the server")
        return SSHError(f"{where}: SSH failed: {exc}", "check that the port speaks SSH")

    def connect(self) -> "Connection":
        """Connect now (done lazily by run/put); retries transient drops with backoff."""
        if self._live():
            return self
        self.close()
        for attempt in range(self.retries + 1):
            try:
                self._open()
                return self
            except BaseException as exc:
                self.close()
                if not _transient(exc) or attempt == self.retries:
                    raise self._translate(exc) from None
                time.sleep(0.3 * 2 ** attempt)
        raise AssertionError("the loop returns or raises")

    def _live(self) -> bool:
        transport = self._clients[-1].get_transport() if self._clients else None
        return bool(transport and transport.is_active())

    def close(self) -> None:
        for client in reversed(self._clients):
            client.close()
        self._clients.clear()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # commands -------------------------------------------------------------------
    def _wrap_sudo(self, command: str, sudo: bool) -> str:
        if not sudo or self.username == "root":
            return command
        return f"sudo -n sh -c {shlex.quote(command)}"

    def run(self, command: str, timeout: float = 60.0, sudo: bool = False,
            stdin: str | None = None) -> RunResult:
        """Run `command` through the login shell; a dropped connection is retried."""
        full = self._wrap_sudo(command, sudo)
        for attempt in range(self.retries + 1):
            self.connect()
            try:
                result = self._exec(full, timeout, stdin)
                break
            except (EOFError, paramiko.SSHException, ConnectionResetError, BrokenPipeError) as exc:
                self.close()
                if attempt == self.retries:
                    raise SSHError(f"{self.label}: connection dropped during `{command[:60]}`: {exc}",
                                   "check the network to the server and try again") from None
                time.sleep(0.3 * 2 ** attempt)
        if sudo and result.exit_code != 0 and "sudo: a password is required" in result.stderr:
            raise SSHError(f"{self.label}: user {self.username!r} cannot sudo without a password",
                           f"allow it (`{self.username} ALL=(ALL) NOPASSWD:ALL` via visudo) "
                           "or import the server as root")
        return RunResult(command, result.exit_code, result.stdout, result.stderr)

    def _exec(self, command: str, timeout: float, stdin: str | None) -> RunResult:
        chan = self._clients[-1].get_transport().open_session(timeout=self.connect_timeout)
        try:
            chan.exec_command(command)
            if stdin is not None:
                try:
                    chan.sendall(stdin.encode())
                except OSError:
                    if not chan.closed:
                        raise
                    # the command ended without reading its input (a ForceCommand, say);
                    # what it printed is still buffered, so read on
            chan.shutdown_write()
            out, err = io.BytesIO(), io.BytesIO()
            deadline = time.monotonic() + timeout
            while True:
                while chan.recv_ready():
                    out.write(chan.recv(65536))
                while chan.recv_stderr_ready():
                    err.write(chan.recv_stderr(65536))
                if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if chan.closed and not chan.exit_status_ready():
                    raise EOFError("channel closed without an exit status")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CommandTimeout(f"{self.label}: `{command[:60]}` still running after "
                                         f"{timeout:g}s", "the server may be overloaded; retry later")
                select.select([chan], [], [], min(left, 0.5))
            return RunResult(command, chan.recv_exit_status(),
                             out.getvalue().decode(errors="replace"),
                             err.getvalue().decode(errors="replace"))
        finally:
            chan.close()

    def put(self, data: bytes | str | Path, remote_path: str, mode: int = 0o644,
            sudo: bool = False) -> None:
        """Upload bytes (or a local file, streamed: image tarballs run to tens of GB) to
        `remote_path` with `mode`.

        The file is private from the moment it exists (a secret has no readable window):
        created 0600 by the SFTP open itself (O_EXCL, fresh name), then renamed into place.
        """
        payload = data.encode() if isinstance(data, str) else data
        self.connect()
        if sudo and self.username != "root":
            self._put_via_private_dir(payload, remote_path, mode)
            return
        directory, slash, name = remote_path.rpartition("/")
        fresh = f"{directory}{slash}.{name}.geotrain-{secrets.token_hex(8)}"
        self._sftp_write(fresh, payload, mode, final=remote_path)

    def _sftp_write(self, path: str, payload: bytes | Path, mode: int, final: str | None) -> None:
        """Create `path` (O_EXCL, 0600 in the open), write, set `mode`, rename to `final`."""
        try:
            with self._clients[-1].open_sftp() as sftp:
                try:
                    with create_private(sftp, path) as handle:
                        write_payload(handle, payload)
                        if mode != PRIVATE_MODE:
                            handle.chmod(mode)  # the content is written; a secret stays 0600
                    if final:
                        sftp.posix_rename(path, final)
                except BaseException:
                    remove_quietly(sftp, path)
                    raise
        except (OSError, paramiko.SSHException) as exc:
            raise SSHError(f"{self.label}: cannot write {final or path}: {exc}",
                           "check the directory exists and is writable by the user") from None

    def _put_via_private_dir(self, payload: bytes | Path, remote_path: str, mode: int) -> None:
        """A non-root login: upload into a fresh 0700 `mktemp -d` dir, then root moves it
        into place through a 0600 `mktemp` file beside the target (never an open window)."""
        made = self.run("umask 077 && mktemp -d /tmp/.geotrain-upload.XXXXXXXXXX")
        private_dir = made.stdout.strip()
        if not made.ok or not re.fullmatch(r"/tmp/\.geotrain-upload\.[A-Za-z0-9]{10}", private_dir):
            raise SSHError(f"{self.label}: cannot make a private upload directory: "
                           f"{(made.stderr or made.stdout).strip()[:200]}", "check /tmp is writable")
        staged = f"{private_dir}/upload"
        try:
            self._sftp_write(staged, payload, PRIVATE_MODE, final=None)
            moved = self.run(install_command(staged, remote_path, mode), sudo=True)
        finally:
            self.run(f"rm -rf {shlex.quote(private_dir)}")
        if not moved.ok:
            raise SSHError(f"{self.label}: cannot install {remote_path}: {moved.stderr.strip()}",
                           "check the directory exists")

