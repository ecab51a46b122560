"""A secret uploaded with Connection.put() is never readable by another user, seen from the server.

The server's SFTP subsystem runs under strace, so every file it creates is logged with
the mode the open asked for: the test does not race a polling loop, it reads what the
kernel was asked to do. A 0644 create (paramiko's plain `open()` + chmod after) fails it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from core.nodes.known_hosts import KnownHosts
from core.nodes.ssh import Connection

PREFIX, SUBNET = "gths", "10.231.0.0/24"  # distinct from the other suites' hosts
SFTP_SERVER = next((p for p in ("/usr/lib/openssh/sftp-server", "/usr/lib/sftp-server")
                    if Path(p).exists()), None)
CREATE = re.compile(r'open(?:at)?\((?:AT_FDCWD, )?"([^"]+)", ([A-Z_|]+), (0[0-7]+)\)')
CHMOD = re.compile(r'f?chmod(?:at)?\((?:[^,]+, )?(?:"([^"]+)", )?(0[0-7]+)\)')


@pytest.fixture
def traced_host(make_test_hosts, tmp_path):
    if not shutil.which("strace") or not SFTP_SERVER:
        pytest.skip("needs strace and OpenSSH's sftp-server")
    (host,) = make_test_hosts(1, prefix=PREFIX, subnet=SUBNET)
    trace_dir = host.dir / "sftp-trace"
    trace_dir.mkdir()
    wrapper = host.dir / "sftp-traced"
    wrapper.write_text(f"#!/bin/sh\nexec strace -f -qq -e trace=open,openat,creat,chmod,fchmod,"
                       f"fchmodat -o {trace_dir}/trace.$$ {SFTP_SERVER} \"$@\"\n")
    wrapper.chmod(0o755)
    config = host.dir / "sshd_config"
    config.write_text(config.read_text().replace("Subsystem sftp internal-sftp",
                                                 f"Subsystem sftp {wrapper}"))
    host.restart_sshd()
    return host, trace_dir


def _created(trace_dir: Path) -> list[tuple[str, str, int]]:
    """(path, flags, mode) of every open with O_CREAT the SFTP server made."""
    text = "\n".join(p.read_text() for p in sorted(trace_dir.glob("trace.*")))
    return [(path, flags, int(mode, 8)) for path, flags, mode in CREATE.findall(text)
            if "O_CREAT" in flags]


def _connect(host, tmp_path) -> Connection:
    return Connection(host.ip, host.port, host.user, key_path=host.key_path,
                      known_hosts=KnownHosts(tmp_path / "known_hosts"),
                      trusted={host.fingerprint}, connect_timeout=5)


def test_a_secret_is_created_0600_by_the_open_itself(traced_host, tmp_path):
    host, trace_dir = traced_host
    with _connect(host, tmp_path) as conn:
        conn.put("join-token", "/run/token", mode=0o600)
        conn.put("old", "/run/public.txt", mode=0o644)
        conn.put("rotated-token", "/run/token", mode=0o600)  # replaces an existing secret
    created = _created(trace_dir)
    assert len(created) == 3, created
    for path, flags, mode in created:
        assert "O_EXCL" in flags and mode & 0o077 == 0, (path, flags, oct(mode))
        assert path.startswith("/run/.") and ".geotrain-" in path  # a fresh name, renamed after
    assert host.run("stat -c '%a %U' /run/token; cat /run/token").stdout == "600 root\nrotated-token"
    assert host.run("stat -c %a /run/public.txt").stdout == "644\n"
    assert host.run("ls -A /run | grep -c geotrain", check=False).stdout.strip() == "0"


def test_a_non_root_upload_goes_through_a_private_directory(traced_host, tmp_path):
    # the path a non-root login takes (upload as the user, root moves it into place),
    # exercised here as root: the staging directory must be 0700 and the file 0600
    host, trace_dir = traced_host
    with _connect(host, tmp_path) as conn:
        conn.connect()
        conn._put_via_private_dir(b"join-token", "/run/k3s-token", 0o600)
    (path, flags, mode), = _created(trace_dir)
    assert re.fullmatch(r"/tmp/\.geotrain-upload\.[A-Za-z0-9]{10}/upload", path)
    assert "O_EXCL" in flags and mode == 0o600
    assert host.run("stat -c %a /run/k3s-token; cat /run/k3s-token").stdout == "600\njoin-token"
    assert not Path(path).parent.exists()  # the private directory is gone (/tmp is shared)


def test_a_failed_upload_leaves_no_stray_file(traced_host, tmp_path):
    host, _ = traced_host
    with _connect(host, tmp_path) as conn:
        with pytest.raises(Exception, match="cannot write /nonexistent-dir/x"):
            conn.put("secret", "/nonexistent-dir/x", mode=0o600)
        host.run("mkdir -p /run/d/target")  # rename onto a directory fails after the write
        with pytest.raises(Exception, match="cannot write /run/d/target"):
            conn.put("secret", "/run/d/target", mode=0o600)
    assert host.run("ls -A /run/d").stdout == "target\n"
