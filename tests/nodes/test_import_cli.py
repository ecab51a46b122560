"""`geotrain nodes …` end to end against real sshd test hosts, and its bad input."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from core.cli import main
from core.nodes.facts import listening
from core.nodes.known_hosts import known_hosts_path
from tests.testhosts import start_ip_echo


@pytest.fixture
def ip_echo(monkeypatch):
    """A stand-in for api.ipify.org on the test bridge (start it after the hosts exist)."""
    servers = []

    def start(address: str) -> None:
        server = start_ip_echo(address)
        servers.append(server)
        monkeypatch.setenv("GEOTRAIN_PUBLIC_IP_URLS", f"http://{address}:{server.server_port}/")

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def listed(capsys) -> list[dict]:
    code, out, _ = cli(capsys, "nodes", "list", "--json")
    assert code == 0
    return json.loads(out)


def import_ssh_args(host, name=None, **overrides) -> list[str]:
    args = {"--name": name or host.name, "--endpoint": host.endpoint, "--username": host.user,
            "--ssh-key-path": host.key_path, "--trust-host-key": host.fingerprint,
            "--connect-timeout": "3"}
    args.update(overrides)
    return ["nodes", "import-ssh"] + [x for k, v in args.items() if v is not None for x in (k, v)]


def test_import_three_hosts_at_once_and_list_json(make_test_hosts, ip_echo, capsys, tmp_path):
    hosts = make_test_hosts(3)
    ip_echo("10.201.0.1")
    servers = tmp_path / "servers.yaml"
    servers.write_text("nodes:\n" + "".join(
        f"  - name: {h.name}\n    endpoint: {h.endpoint}\n    username: root\n"
        f"    ssh_key_path: {h.key_path}\n    datacenter: dc-{i}\n    trust_host_key: {h.fingerprint}\n"
        for i, h in enumerate(hosts)))
    code, out, err = cli(capsys, "nodes", "import", str(servers))
    assert code == 0, err
    assert out.count("AVAILABLE") == 3

    nodes = listed(capsys)
    assert [n["name"] for n in nodes] == [h.name for h in hosts]
    for node, host in zip(nodes, hosts):
        facts = node["facts"]
        assert node["status"] == "AVAILABLE" and node["blockers"] == []
        assert (node["host"], node["datacenter"]) == (host.ip, f"dc-{host.name[-1]}")
        assert facts["system"]["system"] == "Linux" and facts["system"]["arch"]
        assert facts["cpu"]["cores"] >= 1 and facts["memory"]["total_mb"] > 0
        assert facts["disk"]["free_gb"] > 0 and facts["disk"]["var_lib_free_gb"] > 0
        assert not listening.holders(facts["listening"], "udp", 51820)
        assert facts["sudo"]["root"] and facts["gpus"] == []
        assert facts["public_ip"] == host.ip, "the probe needs curl or wget here (apt-get install curl)"
    pins = known_hosts_path().read_text().splitlines()
    assert sorted(p.split()[0] for p in pins) == sorted(h.ip for h in hosts)

    code, out, _ = cli(capsys, "nodes", "show", hosts[1].name)
    assert code == 0 and "Linux" in out and f"root@{hosts[1].ip}:22" in out
    code, out, _ = cli(capsys, "nodes", "show", hosts[1].name, "--json")
    assert json.loads(out)["facts"]["public_ip"] == hosts[1].ip


def test_refresh_marks_unreachable_and_blocked_then_remove(make_test_hosts, capsys):
    a, b = make_test_hosts(2)
    for host in (a, b):
        assert cli(capsys, *import_ssh_args(host))[0] == 0
    b.stop_sshd()
    a.run("nohup python3 -c 'import socket,time; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
          " s.bind((\"0.0.0.0\", 51820)); time.sleep(300)' >/dev/null 2>&1 &")
    code, out, _ = cli(capsys, "nodes", "refresh", "--connect-timeout", "3")
    assert code == 1
    nodes = {n["name"]: n for n in listed(capsys)}
    assert nodes[a.name]["status"] == "BLOCKED"
    # the preflight's words (one blocker policy): the process is named where ss can see it
    assert "udp port 51820 (WireGuard) is taken by python3" in nodes[a.name]["blockers"][0]
    assert nodes[b.name]["status"] == "UNREACHABLE"
    assert "connection refused" in nodes[b.name]["blockers"][0]
    b.restart_sshd()
    assert cli(capsys, "nodes", "refresh", b.name)[0] == 0
    assert {n["name"]: n["status"] for n in listed(capsys)}[b.name] == "AVAILABLE"
    code, out, _ = cli(capsys, "nodes", "remove", a.name)
    assert code == 0 and "removed" in out
    assert [n["name"] for n in listed(capsys)] == [b.name]


def _bad_case(case, hosts, tmp_path) -> list[str]:
    a, b = hosts
    if case == "unreachable host":
        return import_ssh_args(a, **{"--endpoint": "10.201.0.99", "--connect-timeout": "1.5"})
    if case == "closed port":
        return import_ssh_args(a, **{"--endpoint": f"{a.ip}:2222"})
    if case == "wrong user":
        return import_ssh_args(a, **{"--username": "nosuchuser"})
    if case in ("wrong key", "encrypted key without passphrase"):
        key = tmp_path / "id_case"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "pw" if "encrypted" in case else "",
                        "-f", str(key)], check=True)
        if "encrypted" in case:
            a.authorize_key(f"{key}.pub")
        return import_ssh_args(a, **{"--ssh-key-path": str(key)})
    if case == "untrusted host key":
        return import_ssh_args(b, **{"--trust-host-key": None})
    if case == "bad fingerprint":
        return import_ssh_args(a, **{"--trust-host-key": "MD5:aa:bb"})
    if case == "missing key file":
        return import_ssh_args(a, **{"--ssh-key-path": str(tmp_path / "nope")})
    if case == "duplicate name":
        return import_ssh_args(b, name="taken")
    if case == "bad name":
        return import_ssh_args(a, name="Not_OK")
    if case == "bad endpoint":
        return import_ssh_args(a, **{"--endpoint": "host:notaport"})
    if case == "malformed file":
        path = tmp_path / "servers.csv"
        path.write_text(f"name,endpoint,username\nx1,{a.ip},root\nx2,{b.ip}\n")
        return ["nodes", "import", str(path)]
    if case == "one bad server in a batch":
        path = tmp_path / "servers.yaml"
        path.write_text("".join(f"- {{name: {n}, endpoint: '{e}', username: root, ssh_key_path: "
                                f"{a.key_path}, trust_host_key: '{fp}'}}\n"
                                for n, e, fp in (("ok-a", a.ip, a.fingerprint),
                                                 ("ok-b", b.ip, b.fingerprint),
                                                 ("bad", f"{b.ip}:2222", b.fingerprint))))
        return ["nodes", "import", str(path), "--connect-timeout", "3"]
    if case == "same name twice in a batch":
        path = tmp_path / "servers.yaml"
        path.write_text(f"- {{name: dup, endpoint: {a.ip}, username: root}}\n"
                        f"- {{name: dup, endpoint: {b.ip}, username: root}}\n")
        return ["nodes", "import", str(path)]
    raise AssertionError(case)


@pytest.mark.parametrize("case, message", [
    ("unreachable host", r"no answer within 1.5s|cannot connect"),
    ("closed port", "connection refused — no SSH server on port 2222"),
    ("wrong user", "authentication failed for user 'nosuchuser'"),
    ("wrong key", "authentication failed for user 'root' with key"),
    ("encrypted key without passphrase", "is encrypted and no passphrase was given"),
    ("untrusted host key", "is not trusted yet"),
    ("bad fingerprint", "is not a SHA256 fingerprint"),
    ("missing key file", "does not exist"),
    ("duplicate name", "a node named 'taken' already exists"),
    ("bad name", "node name 'Not_OK' is not valid"),
    ("bad endpoint", "endpoint 'host:notaport' is not HOST or HOST:PORT"),
    ("malformed file", "servers.csv line 3: missing username"),
    ("one bad server in a batch", "bad: root@.*:2222: connection refused"),
    ("same name twice in a batch", "servers.yaml line 2: a node named 'dup' already exists"),
])
def test_bad_input_is_one_clear_line_and_changes_nothing(make_test_hosts, capsys, tmp_path, case, message):
    hosts = make_test_hosts(2)
    assert cli(capsys, *import_ssh_args(hosts[0], name="taken"))[0] == 0
    before_nodes, before_pins = listed(capsys), known_hosts_path().read_text()

    code, out, err = cli(capsys, *_bad_case(case, hosts, tmp_path))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and " — " in lines[0], err
    assert re.search(message, lines[0]), lines[0]
    assert listed(capsys) == before_nodes
    assert known_hosts_path().read_text() == before_pins


def test_changed_host_key_is_refused_until_the_new_one_is_given(make_test_hosts, capsys):
    (host,) = make_test_hosts(1)
    assert cli(capsys, *import_ssh_args(host))[0] == 0
    assert cli(capsys, "nodes", "remove", host.name)[0] == 0
    pins = known_hosts_path().read_text()
    host.regenerate_host_key()
    code, _, err = cli(capsys, *import_ssh_args(host, **{"--trust-host-key": None}))
    assert code == 2 and "HOST KEY CHANGED" in err and f"--trust-host-key {host.fingerprint}" in err
    assert listed(capsys) == [] and known_hosts_path().read_text() == pins
    assert cli(capsys, *import_ssh_args(host))[0] == 0  # the new fingerprint, given explicitly
    assert host.host_pubkey.split()[1] in known_hosts_path().read_text()


def test_non_linux_host_is_refused(make_test_hosts, capsys):
    fake_uname = "ForceCommand printf '@@geotrain-fact:system\\nDarwin 23.4.0 arm64\\n'"
    (host,) = make_test_hosts(1, sshd_extra=fake_uname)
    code, _, err = cli(capsys, *import_ssh_args(host))
    assert code == 2 and "runs Darwin, not Linux" in err
    assert listed(capsys) == [] and not known_hosts_path().exists()


def test_import_from_ssh_config_aliases_through_a_jump_host(make_test_hosts, capsys, tmp_path):
    bastion, target = make_test_hosts(2)
    config = tmp_path / "ssh_config"
    config.write_text(f"Host Lab-Box\n  HostName {target.ip}\n  User root\n  IdentityFile {target.key_path}\n"
                      f"  ProxyJump root@{bastion.ip}\n")
    code, _, err = cli(capsys, "nodes", "import", "--from-ssh-config", "Lab-Box", "--ssh-config", str(config),
                       "--trust-host-key", bastion.fingerprint, "--trust-host-key", target.fingerprint,
                       "--datacenter", "lab")
    assert code == 0, err
    (node,) = listed(capsys)
    assert (node["name"], node["host"], node["jump"], node["datacenter"]) == (
        "lab-box", target.ip, f"root@{bastion.ip}", "lab")
    assert node["facts"]["system"]["system"] == "Linux"
    code, _, err = cli(capsys, "nodes", "import", "--from-ssh-config", "nope", "--ssh-config", str(config))
    assert code == 2 and "no `Host nope` entry" in err


def test_a_frozen_server_does_not_stall_refresh_of_the_others(make_test_hosts, capsys):
    hosts = make_test_hosts(3)
    for host in hosts:
        assert cli(capsys, *import_ssh_args(host))[0] == 0
    frozen = hosts[1]
    os.kill(frozen.pid, signal.SIGSTOP)  # accepts TCP (kernel backlog), never says a word
    try:
        start = time.monotonic()
        code, out, _ = cli(capsys, "nodes", "refresh", "--connect-timeout", "2")
        elapsed = time.monotonic() - start
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    assert code == 1 and elapsed < 6
    status = {n["name"]: (n["status"], n["blockers"]) for n in listed(capsys)}
    assert status[frozen.name][0] == "UNREACHABLE"
    assert "no answer within 2s" in status[frozen.name][1][0]
    assert status[hosts[0].name] == ("AVAILABLE", []) and status[hosts[2].name] == ("AVAILABLE", [])


def test_terminal_prompt_pins_the_key_the_person_accepts(make_test_hosts, capsys, monkeypatch):
    (host,) = make_test_hosts(1)
    answers = iter(["n", "yes"])
    monkeypatch.setattr("core.cli.prompts._interactive", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    code, _, err = cli(capsys, *import_ssh_args(host, **{"--trust-host-key": None}))
    assert code == 2 and host.fingerprint in err and "not trusted yet" in err
    assert not known_hosts_path().exists()
    code, _, err = cli(capsys, *import_ssh_args(host, **{"--trust-host-key": None}))
    assert code == 0 and f"key fingerprint is {host.fingerprint}" in err
    assert host.host_pubkey.split()[1] in known_hosts_path().read_text()
