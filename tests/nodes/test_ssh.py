"""core.nodes.ssh.Connection against real OpenSSH sshd test hosts."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from core.nodes.known_hosts import KnownHosts
from core.nodes.ssh import AuthFailed, CommandTimeout, Connection, HostKeyError, KeyRing, Unreachable
from core.nodes.ssh_config import ssh_config_host


@pytest.fixture
def known(tmp_path):
    return KnownHosts(tmp_path / "known_hosts")


def connect(host, known, **kwargs) -> Connection:
    kwargs.setdefault("trusted", {host.fingerprint})
    kwargs.setdefault("key_path", host.key_path)
    return Connection(host.ip, host.port, kwargs.pop("username", host.user), known_hosts=known,
                      connect_timeout=kwargs.pop("connect_timeout", 5), **kwargs)


def test_run_put_timeout_and_reconnect_after_a_drop(make_test_hosts, known):
    (host,) = make_test_hosts(1)
    with connect(host, known) as conn:
        result = conn.run("hostname; echo oops >&2; exit 3")
        assert (result.exit_code, result.stdout, result.stderr) == (3, f"{host.name}\n", "oops\n")
        assert conn.run("cat", stdin="fed on stdin").stdout == "fed on stdin"
        conn.put("not for others", "/run/secret.conf", mode=0o600)
        assert conn.run("stat -c %a /run/secret.conf; cat /run/secret.conf").stdout == "600\nnot for others"
        with pytest.raises(CommandTimeout, match="still running after 0.5s"):
            conn.run("sleep 5", timeout=0.5)
        # drop the connection for real: end the server-side session processes
        sessions = [int(p) for p in subprocess.run(["ip", "netns", "pids", host.name],
                                                   capture_output=True, text=True).stdout.split()]
        for pid in sessions:
            if pid != host.pid:
                os.kill(pid, signal.SIGKILL)
        assert conn.run("echo back").stdout == "back\n"


def test_a_command_that_ignores_its_stdin_still_returns_its_output(make_test_hosts, known):
    # a server whose ForceCommand prints and exits closes the channel while stdin is still
    # being sent; 4 MB overruns the channel window, so the send always meets the closed channel
    (host,) = make_test_hosts(1)
    with connect(host, known) as conn:
        result = conn.run("echo done", stdin="x" * (4 << 20))
        assert (result.exit_code, result.stdout) == (0, "done\n")


def test_host_key_is_pinned_on_first_contact_and_a_changed_key_refused(make_test_hosts, known):
    (host,) = make_test_hosts(1)
    with pytest.raises(HostKeyError, match="not trusted yet") as err:
        connect(host, known, trusted=set()).connect()
    assert host.fingerprint in err.value.hint
    asked = []
    conn = connect(host, known, trusted=set(), confirm=lambda *a: asked.append(a) or True)
    conn.run("true")
    conn.close()
    assert asked == [(host.ip, "ssh-ed25519", host.fingerprint)]
    known.save()
    assert known.path.read_text().split() == [host.ip] + host.host_pubkey.split()
    connect(host, known, trusted=set()).run("true")  # pinned: no question any more

    old = host.fingerprint
    host.regenerate_host_key()
    with pytest.raises(HostKeyError, match="HOST KEY CHANGED") as err:
        connect(host, known, trusted={old}).connect()
    assert f"--trust-host-key {host.fingerprint}" in err.value.hint
    connect(host, known, trusted={host.fingerprint}).run("true")  # the way to accept it
    known.save()
    assert host.host_pubkey.split()[1] in known.path.read_text()


def test_a_wrong_trusted_fingerprint_is_refused(make_test_hosts, known):
    a, b = make_test_hosts(2)
    with pytest.raises(HostKeyError, match="not one given with --trust-host-key") as err:
        connect(a, known, trusted={b.fingerprint}).connect()
    assert f"add --trust-host-key {a.fingerprint}" in err.value.hint


def test_jump_host(make_test_hosts, known):
    jump, target = make_test_hosts(2)
    conn = connect(target, known, jump=f"root@{jump.ip}", trusted={jump.fingerprint, target.fingerprint})
    seen_from = conn.run("echo $SSH_CONNECTION").stdout.split()[0]
    conn.close()
    assert seen_from == jump.ip  # the target saw the jump host connect, not us
    target.stop_sshd()
    with pytest.raises(Unreachable, match=f"the jump host cannot reach {target.ip}:22"):
        connect(target, known, jump=f"root@{jump.ip}", trusted={jump.fingerprint}).connect()


def test_encrypted_key(make_test_hosts, known, tmp_path):
    (host,) = make_test_hosts(1)
    key = tmp_path / "id_locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "s3cret", "-f", str(key)], check=True)
    host.authorize_key(f"{key}.pub")
    with pytest.raises(AuthFailed, match="is encrypted and no passphrase was given"):
        connect(host, known, key_path=str(key)).connect()
    with pytest.raises(AuthFailed, match="wrong passphrase"):
        connect(host, known, key_path=str(key), keys=KeyRing(lambda p: "nope")).connect()
    asked = []
    conn = connect(host, known, key_path=str(key), keys=KeyRing(lambda p: asked.append(p) or "s3cret"))
    assert conn.run("echo in").stdout == "in\n"
    conn.close()
    assert asked == [str(key)]


@pytest.mark.parametrize("case, error, message", [
    ("unreachable", Unreachable, "no answer within|cannot connect"),
    ("closed port", Unreachable, "connection refused"),
    ("wrong user", AuthFailed, "authentication failed for user 'nosuchuser'"),
    ("wrong key", AuthFailed, "authentication failed"),
])
def test_connection_failures_say_what_is_wrong(make_test_hosts, known, tmp_path, case, error, message):
    (host,) = make_test_hosts(1)
    kwargs = {}
    if case == "unreachable":
        host.ip = "10.201.0.99"  # nobody there
        kwargs["connect_timeout"] = 1.5
    elif case == "closed port":
        host.port = 2222
    elif case == "wrong user":
        kwargs["username"] = "nosuchuser"
    else:
        other = tmp_path / "id_other"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
        kwargs["key_path"] = str(other)
    with pytest.raises(error, match=message) as err:
        connect(host, known, **kwargs).connect()
    assert err.value.hint
    assert not known.path.exists()


def test_ssh_config_alias(tmp_path):
    config = tmp_path / "config"
    config.write_text("Host gpu-box\n  HostName 10.9.8.7\n  Port 2200\n  User ubuntu\n"
                      "  IdentityFile /keys/id_gpu\n  ProxyJump bastion\n")
    assert ssh_config_host("gpu-box", str(config)) == {
        "hostname": "10.9.8.7", "port": 2200, "user": "ubuntu", "key_path": "/keys/id_gpu",
        "jump": "bastion"}
    with pytest.raises(Exception, match="no `Host other` entry"):
        ssh_config_host("other", str(config))
