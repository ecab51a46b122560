"""Whether UDP 51820 (WireGuard's port) is free, read from /proc/net/udp{,6}."""

from __future__ import annotations

PORT = 51820
COMMAND = "cat /proc/net/udp /proc/net/udp6"


def parse(output: str, port: int = PORT) -> dict:
    suffix = f":{port:04X}"
    for line in output.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[0].endswith(":") and parts[1].upper().endswith(suffix):
            return {"port": port, "free": False}
    return {"port": port, "free": True}
