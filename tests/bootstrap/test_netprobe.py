"""core/bootstrap/netprobe.py's ping, run as on a node: in a network namespace (root) where
one peer is routed but silent and one answers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parents[2] / "core" / "bootstrap" / "netprobe.py"
NETNS = f"gtprobe{os.getpid()}"


@pytest.fixture
def netns():
    if os.geteuid() != 0:
        pytest.skip("needs root: a network namespace and raw ICMP sockets")
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    try:
        # v0's far end has no address: what is sent to 10.1.2.0/24 goes out and nothing answers
        for cmd in ("ip link set lo up", "ip link add v0 type veth peer name v1",
                    "ip addr add 10.1.2.1/24 dev v0", "ip link set v0 up", "ip link set v1 up"):
            subprocess.run(["ip", "netns", "exec", NETNS, *cmd.split()], check=True)
        yield NETNS
    finally:
        subprocess.run(["ip", "netns", "del", NETNS], check=False)


def ping(netns: str, *ips: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", netns, sys.executable, str(PROBE), "ping", "--timeout", "2",
                           *ips], capture_output=True, text=True, timeout=60)


def test_a_silent_peer_does_not_use_up_the_others_time(netns):
    # listed first, the silent peer used to take the whole deadline and fail every later peer
    result = ping(netns, "10.1.2.3", "127.0.0.1", "10.9.0.1")  # silent, answers, no route at all
    lines = result.stdout.splitlines()
    assert result.returncode == 1, result.stderr
    assert lines[0] == "fail 10.1.2.3" and lines[1].startswith("ok 127.0.0.1 ") and lines[2] == "fail 10.9.0.1"
    assert float(lines[1].split()[2]) >= 0 and "Traceback" not in result.stderr


def test_all_answer(netns):
    result = ping(netns, "127.0.0.1", "10.1.2.1")  # the namespace's own addresses
    assert result.returncode == 0 and [line.split()[:2] for line in result.stdout.splitlines()] == [
        ["ok", "127.0.0.1"], ["ok", "10.1.2.1"]]
