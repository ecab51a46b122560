"""Throwaway Linux "servers" for tests: one network namespace + real OpenSSH sshd each.

Every host has its own address on a shared bridge (the bridge holds the subnet's first
address, so this machine reaches all hosts), its own sshd with its own host key, and its
own mount + UTS namespace: private tmpfs on /run, /var/lib/containerd, /etc/containerd,
/etc/wireguard, /var/lib/rancher, /etc/rancher, /var/lib/geotrain (so wireguard-go or containerd on one host never sees another's sockets,
and a teardown's `rm -rf /var/lib/geotrain` never reaches this machine's),
its own hostname and /etc/hosts. Needs root, `ip`, `unshare`, `sshd`, `ssh-keygen`.

    with make_hosts(3, prefix="gtn", subnet="10.201.0.0/24") as hosts:
        hosts[0].ip, hosts[0].key_path, hosts[0].fingerprint, hosts[0].run("uname -a")

Engineers running suites at the same time must use distinct prefixes and subnets.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import http.server
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

BASE_DIR = Path("/tmp/geotrain-testhosts")
PRIVATE_DIRS = ("/var/lib/containerd", "/etc/containerd", "/etc/wireguard",
                "/var/lib/rancher", "/etc/rancher", "/var/lib/geotrain")
REQUIRED_TOOLS = ("ip", "unshare", "nsenter", "sshd", "ssh-keygen")
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"

SSHD_CONFIG = """\
Port {port}
ListenAddress {ip}
HostKey {dir}/ssh_host_ed25519_key
PidFile /run/sshd.pid
AuthorizedKeysFile {dir}/authorized_keys_%u
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
MaxStartups 200
MaxSessions 50
LogLevel ERROR
Subsystem sftp internal-sftp
{extra}
"""


@dataclass
class TestHost:
    """One test host; `user` logs in with the private key at `key_path`."""

    __test__ = False  # not a pytest test class

    name: str  # also the netns name and the host's hostname
    ip: str
    port: int
    user: str
    key_path: str
    host_pubkey: str  # "ssh-ed25519 AAAA…" as a known_hosts line would hold it
    dir: Path
    veth: str  # the bridge-side veth in the root namespace (for tc shaping)
    pid: int = 0  # sshd's pid, inside the host's namespaces
    private_dirs: tuple[str, ...] = ()
    plain_bashrc: bool = True  # hide this machine's /root/.bashrc from logins
    _proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def fingerprint(self) -> str:
        """OpenSSH-style SHA256 fingerprint of the host key (as `ssh-keygen -l` shows)."""
        blob = base64.b64decode(self.host_pubkey.split()[1])
        return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")

    @property
    def endpoint(self) -> str:
        return f"{self.ip}:{self.port}"

    def run(self, command: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a shell command inside the host (its netns, mounts and hostname) as root."""
        return subprocess.run(
            ["nsenter", "-t", str(self.pid), "-m", "-n", "-u", "sh", "-c", command],
            capture_output=True, text=True, check=check, timeout=timeout)

    def stop_sshd(self) -> None:
        """Stop this host's sshd (the namespace stays): makes the port closed."""
        if self._proc and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=10)

    def restart_sshd(self) -> None:
        """Start sshd again (fresh private mounts: /run and the daemon dirs start empty)."""
        self.stop_sshd()
        _start_sshd(self, self.private_dirs)
        _wait_listening(self)

    def regenerate_host_key(self) -> None:
        """As if the server were reinstalled: a new host key, sshd restarted."""
        key = self.dir / "ssh_host_ed25519_key"
        for path in (key, key.with_suffix(".pub")):
            path.unlink()
        _keygen(key, self.name)
        self.host_pubkey = " ".join(key.with_suffix(".pub").read_text().split()[:2])
        self.restart_sshd()

    def authorize_key(self, pubkey_path: str) -> None:
        """Let root log in with one more key."""
        with open(self.dir / "authorized_keys_root", "a") as out:
            out.write(Path(pubkey_path).read_text())


def skip_reason() -> str | None:
    """Why test hosts cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "test hosts need root (network namespaces, sshd); run the tests as root"
    missing = [t for t in REQUIRED_TOOLS if not shutil.which(t)]
    if missing:
        return (f"test hosts need {', '.join(missing)}: "
                "apt-get install openssh-server iproute2 util-linux")
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _names(prefix: str) -> list[str]:
    out = _ip("netns", "list").stdout
    pattern = re.compile(rf"^{re.escape(prefix)}\d+$")
    return [line.split()[0] for line in out.splitlines() if line and pattern.match(line.split()[0])]


def _kill_netns_processes(netns: str) -> None:
    """Stop every process living in the namespace `netns` (all were started by us)."""
    for sig, pause in ((signal.SIGTERM, 0.3), (signal.SIGKILL, 0.1)):
        pids = [int(p) for p in _ip("netns", "pids", netns, check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(pause)


# Locks held by this process: lock name -> (open file, prefixes it is held for).
# Another test run (another checkout, the same suite) using the same prefix or subnet
# waits for them; a crashed run's locks vanish with it, so what it left behind is then
# safe to remove.
_held: dict[str, tuple[object, set[str]]] = {}
LOCK_WAIT_S = 600


def _lock(name: str, prefix: str) -> None:
    if name in _held:
        _held[name][1].add(prefix)
        return
    (BASE_DIR / ".locks").mkdir(parents=True, exist_ok=True)
    handle = open(BASE_DIR / ".locks" / f"{name}.lock", "w")
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                handle.close()
                raise RuntimeError(f"test hosts {name} busy for {LOCK_WAIT_S}s (another test run?)")
            time.sleep(0.2)
    _held[name] = (handle, {prefix})


def _unlock(prefix: str) -> None:
    for name, (handle, prefixes) in list(_held.items()):
        prefixes.discard(prefix)
        if not prefixes:
            del _held[name]
            handle.close()


def teardown(prefix: str) -> None:
    """Remove every host and the bridge of `prefix`, and let other test runs have them."""
    _remove(prefix)
    _unlock(prefix)


def _remove(prefix: str) -> None:
    """Remove the hosts and bridge of `prefix`, including a crashed run's leftovers."""
    for netns in _names(prefix):
        _kill_netns_processes(netns)
        _ip("netns", "del", netns, check=False)
    _ip("link", "del", f"{prefix}br", check=False)
    # a deleted namespace the kernel still keeps alive (a socket of it not yet freed) keeps
    # its veth peer here too: the next run's veth of the same name would then "exist"
    for line in _ip("-o", "link", "show").stdout.splitlines():
        link = line.split(":")[1].strip().split("@")[0] if line.count(":") >= 2 else ""
        if link.startswith(prefix) and link.endswith("v") and link[len(prefix):-1].isdigit():
            _ip("link", "del", link, check=False)
    shutil.rmtree(BASE_DIR / prefix, ignore_errors=True)


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True)


def _make_network(prefix: str, net: ipaddress.IPv4Network) -> str:
    bridge = f"{prefix}br"
    gateway = str(net.network_address + 1)
    _ip("link", "add", bridge, "type", "bridge")
    _ip("addr", "add", f"{gateway}/{net.prefixlen}", "dev", bridge)
    _ip("link", "set", bridge, "up")
    return gateway


def _make_netns(name: str, veth: str, bridge: str, ip: str, gateway: str, plen: int) -> None:
    _ip("netns", "add", name)
    _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
    _ip("link", "set", veth, "master", bridge, "up")
    for args in (("link", "set", "lo", "up"), ("addr", "add", f"{ip}/{plen}", "dev", "eth0"),
                 ("link", "set", "eth0", "up"), ("route", "add", "default", "via", gateway)):
        _ip("-n", name, *args)


def _start_sshd(host: TestHost, private_dirs: tuple[str, ...]) -> None:
    (host.dir / "hosts").write_text(f"127.0.0.1\tlocalhost {host.name}\n{host.ip}\t{host.name}\n")
    mounts = "".join(f"mount -t tmpfs tmpfs {d}; " for d in private_dirs)
    if host.plain_bashrc and Path("/root/.bashrc").is_file():
        (host.dir / "bashrc").write_text("# a fresh server's root: nothing slow at login\n")
        mounts += f"mount --bind {host.dir}/bashrc /root/.bashrc; "
    script = (f"mount -t tmpfs tmpfs /run && mkdir -p /run/sshd && {mounts}"
              f"mount --bind {host.dir}/hosts /etc/hosts; hostname {host.name}; "
              f"exec {SSHD} -D -f {host.dir}/sshd_config -E {host.dir}/sshd.log")
    host._proc = subprocess.Popen(
        ["ip", "netns", "exec", host.name, "unshare", "-m", "-u", "--propagation", "private",
         "sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    host.pid = host._proc.pid  # `ip netns exec` and `unshare` exec in place: this is sshd


def _wait_listening(host: TestHost, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if host._proc.poll() is not None:
            err = host._proc.stderr.read().decode(errors="replace")
            log = (host.dir / "sshd.log").read_text() if (host.dir / "sshd.log").exists() else ""
            raise RuntimeError(f"sshd of test host {host.name} exited: {err}{log}")
        try:
            with socket.create_connection((host.ip, host.port), timeout=0.5) as sock:
                if sock.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd of test host {host.name} not listening after {timeout}s")


def create_hosts(n: int, prefix: str = "gtn", subnet: str = "10.201.0.0/24",
                 sshd_extra: str = "", private_dirs: tuple[str, ...] = PRIVATE_DIRS,
                 port: int = 22, plain_bashrc: bool = True) -> list[TestHost]:
    """Make `n` hosts named `{prefix}0…`; first removes leftovers of the same prefix.

    `sshd_extra` is appended to each sshd_config (e.g. a `ForceCommand`).
    `plain_bashrc` (default) hides this machine's /root/.bashrc from SSH sessions: here it
    runs `pyenv init` (~0.3 s of CPU per command, and a background `pyenv rehash` that,
    killed by teardown, leaves a lock stalling every shell for 60 s).
    Call `teardown(prefix)` when done, or use `make_hosts`, which always does.
    """
    if len(prefix) > 10 or not re.fullmatch(r"[a-z][a-z0-9]*", prefix):
        raise ValueError("prefix: 1-10 lowercase letters/digits (interface names are short)")
    net = ipaddress.ip_network(subnet)
    if n < 1 or n > net.num_addresses - 12:
        raise ValueError(f"{n} hosts do not fit in {subnet}")
    _lock(f"subnet-{net.network_address}-{net.prefixlen}", prefix)  # always subnet, then prefix
    _lock(f"prefix-{prefix}", prefix)
    _remove(prefix)
    for d in private_dirs:
        Path(d).mkdir(parents=True, exist_ok=True)  # mount points must exist
    root = BASE_DIR / prefix
    root.mkdir(parents=True)
    user_key = root / "id_user"
    _keygen(user_key, f"geotrain-test-{prefix}")
    gateway = _make_network(prefix, net)
    hosts = []
    for i in range(n):
        name, ip = f"{prefix}{i}", str(net.network_address + 10 + i)
        hdir = root / name
        hdir.mkdir()
        _keygen(hdir / "ssh_host_ed25519_key", name)
        shutil.copy(f"{user_key}.pub", hdir / "authorized_keys_root")
        (hdir / "sshd_config").write_text(SSHD_CONFIG.format(port=port, ip=ip, dir=hdir, extra=sshd_extra))
        pub = " ".join((hdir / "ssh_host_ed25519_key.pub").read_text().split()[:2])
        host = TestHost(name=name, ip=ip, port=port, user="root", key_path=str(user_key),
                        host_pubkey=pub, dir=hdir, veth=f"{prefix}{i}v",
                        private_dirs=private_dirs, plain_bashrc=plain_bashrc)
        _make_netns(name, host.veth, f"{prefix}br", ip, gateway, net.prefixlen)
        _start_sshd(host, private_dirs)
        hosts.append(host)
    for host in hosts:
        _wait_listening(host)
    return hosts


@contextmanager
def make_hosts(n: int, prefix: str = "gtn", subnet: str = "10.201.0.0/24",
               **kwargs) -> Iterator[list[TestHost]]:
    """`create_hosts` whose hosts are torn down on exit, whatever happened inside."""
    try:
        yield create_hosts(n, prefix, subnet, **kwargs)
    finally:
        teardown(prefix)


class _CallerAddress(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = self.client_address[0].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def start_ip_echo(address: str) -> http.server.ThreadingHTTPServer:
    """A stand-in for api.ipify.org on `address` (e.g. the bridge): answers with the
    caller's address. Its URL: f"http://{address}:{server.server_port}/"; stop with
    `server.shutdown(); server.server_close()`."""
    server = http.server.ThreadingHTTPServer((address, 0), _CallerAddress)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
