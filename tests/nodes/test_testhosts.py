"""The test-host fixture itself: isolated namespaces, reachable sshd, clean teardown."""

from __future__ import annotations

import subprocess

import pytest

from tests import testhosts


def test_hosts_are_isolated_and_reach_each_other(make_test_hosts):
    hosts = make_test_hosts(2, prefix="gtnf", subnet="10.201.0.0/24")
    a, b = hosts
    assert a.run("hostname").stdout.strip() == a.name
    a.run("touch /run/only-on-a /etc/wireguard/only-on-a")
    assert b.run("ls /run /etc/wireguard").stdout.count("only-on-a") == 0
    # b's sshd answers a's TCP connection across the bridge
    banner = a.run(f"bash -c 'exec 3<>/dev/tcp/{b.ip}/22; head -c 4 <&3'").stdout
    assert banner == "SSH-"
    fp = subprocess.run(["ssh-keygen", "-lf", str(a.dir / "ssh_host_ed25519_key.pub")],
                        capture_output=True, text=True, check=True).stdout.split()[1]
    assert fp == a.fingerprint


def test_teardown_removes_everything_even_leftovers():
    reason = testhosts.skip_reason()
    if reason:
        pytest.skip(reason)
    testhosts.create_hosts(1, prefix="gtnl", subnet="10.201.0.0/24")  # "crashed": never torn down
    with testhosts.make_hosts(1, prefix="gtnl", subnet="10.201.0.0/24") as hosts:
        assert hosts[0].run("hostname").stdout.strip() == "gtnl0"
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "gtnl0" not in listed
    assert subprocess.run(["ip", "link", "show", "gtnlbr"], capture_output=True).returncode != 0
    assert not (testhosts.BASE_DIR / "gtnl").exists()
