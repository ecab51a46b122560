"""Emulated datacenters: one network namespace per datacenter, joined through a hub by shaped veth links.

    dc0 (10.210.0.1) --veth, tbf--+
                                   hub namespace (bridge)
    dc1 (10.210.0.2) --veth, tbf--+

Each datacenter's uplink is shaped with `tbf` on both veth ends (egress of the
datacenter and egress of the hub towards it), so traffic between two datacenters
crosses two shaped links of the same rate. The kernel here has no `netem`; with
`rtt_ms` each datacenter runs recipes/bench/wan_delay.py, a user-space delay line on its
egress (half the round trip each way). `window_kb` caps TCP socket buffers in the
datacenters, so one connection carries at most window/RTT: the regime of a long
fat link, scaled down to rates a user-space delay line can carry. Root only.
Namespaces carry a fixed prefix; `teardown()` removes every namespace with it,
including leftovers of a crashed run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

PREFIX = "gtwan-"
HUB = PREFIX + "hub"
SUBNET = "10.210.0"
IFACE = "eth0"  # the datacenter's uplink, inside its namespace


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


def ns_exec(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return sh("ip", "netns", "exec", ns, *args, check=check)


def our_namespaces() -> list[str]:
    out = sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def teardown() -> None:
    """Kill what still runs inside our namespaces, then delete them."""
    for ns in our_namespaces():
        pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        if pids:
            time.sleep(0.2)
        sh("ip", "netns", "del", ns, check=False)


def shape(ns: str, dev: str, mbit: float) -> None:
    """Token-bucket rate limit on one interface's egress (burst and queue as in MACHINE-NOTES)."""
    sh("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
       "rate", f"{mbit}mbit", "burst", "64kb", "latency", "400ms")


@dataclass
class Wan:
    """`datacenters` namespaces named gtwan-dc<i> with addresses 10.210.0.<i+1>."""

    datacenters: int = 2
    mbit: float = 50.0
    rtt_ms: float = 0.0
    window_kb: int = 0
    names: list[str] = field(default_factory=list)
    delay_lines: list[subprocess.Popen] = field(default_factory=list)

    def address(self, i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    def up(self) -> "Wan":
        teardown()
        sh("ip", "netns", "add", HUB)
        sh("ip", "-n", HUB, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", HUB, "link", "set", "br0", "up")
        sh("ip", "-n", HUB, "link", "set", "lo", "up")
        for i in range(self.datacenters):
            ns = f"{PREFIX}dc{i}"
            sh("ip", "netns", "add", ns)
            self.names.append(ns)
            sh("ip", "-n", HUB, "link", "add", f"h{i}", "type", "veth", "peer", "name", IFACE, "netns", ns)
            sh("ip", "-n", HUB, "link", "set", f"h{i}", "master", "br0", "up")
            prefix = 32 if self.rtt_ms > 0 else 24  # with a delay line, peers are routed via its TUN
            sh("ip", "-n", ns, "addr", "add", f"{self.address(i)}/{prefix}", "dev", IFACE)
            sh("ip", "-n", ns, "link", "set", IFACE, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            if self.mbit > 0:
                shape(ns, IFACE, self.mbit)
                shape(HUB, f"h{i}", self.mbit)
            if self.window_kb > 0:
                limit = f"4096 {min(87380, self.window_kb * 1024)} {self.window_kb * 1024}"
                ns_exec(ns, "sysctl", "-q", "-w", f"net.ipv4.tcp_rmem={limit}", f"net.ipv4.tcp_wmem={limit}")
        if self.rtt_ms > 0:
            self._start_delay_lines()
        return self

    def mac(self, i: int) -> str:
        return ns_exec(self.names[i], "cat", f"/sys/class/net/{IFACE}/address").stdout.strip()

    def _start_delay_lines(self) -> None:
        from pathlib import Path

        root = str(Path(__file__).resolve().parents[2])
        macs = [self.mac(i) for i in range(self.datacenters)]
        for i, ns in enumerate(self.names):
            peers = [f"--peer={self.address(j)}={macs[j]}" for j in range(self.datacenters) if j != i]
            proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "recipes.bench.wan_delay",
                                     "--delay-ms", str(self.rtt_ms / 2), "--iface", IFACE, *peers],
                                    cwd=root, stdout=subprocess.PIPE, text=True,
                                    env={**os.environ, "PYTHONPATH": root})
            self.delay_lines.append(proc)
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the delay line in {ns} did not start")
            sh("ip", "-n", ns, "link", "set", "wdelay0", "up", "txqueuelen", "10000")
            sh("ip", "-n", ns, "route", "add", f"{SUBNET}.0/24", "dev", "wdelay0", "src", self.address(i))

    def down(self) -> None:
        for proc in self.delay_lines:
            proc.kill()
            proc.wait()
        self.delay_lines.clear()
        teardown()
        self.names.clear()

    def tx_bytes(self) -> int:
        """Bytes all datacenters have sent over their uplinks (headers included)."""
        total = 0
        for ns in self.names:
            total += int(ns_exec(ns, "cat", f"/sys/class/net/{IFACE}/statistics/tx_bytes").stdout)
        return total

    def tx_bytes_per_dc(self) -> list[int]:
        """Bytes each datacenter has sent over its uplink (headers included)."""
        return [int(ns_exec(ns, "cat", f"/sys/class/net/{IFACE}/statistics/tx_bytes").stdout) for ns in self.names]

    def __enter__(self) -> "Wan":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()
