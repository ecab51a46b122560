"""The node's own IPv4 addresses (behind NAT its public address is not among them)."""

from __future__ import annotations

import ipaddress

COMMAND = "ip -o -4 addr show"


def parse(output: str) -> list[str]:
    """`2: eth0    inet 10.0.0.5/24 brd …` lines -> ["10.0.0.5", …]."""
    found = []
    for line in output.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[2] == "inet":
            try:
                found.append(str(ipaddress.ip_interface(parts[3]).ip))
            except ValueError:
                continue
    return found
