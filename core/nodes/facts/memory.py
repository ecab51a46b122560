"""Memory, in MiB, from /proc/meminfo."""

from __future__ import annotations

COMMAND = "grep -E '^(MemTotal|MemAvailable):' /proc/meminfo"


def parse(output: str) -> dict:
    values = {}
    for line in output.splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) >= 2 and parts[1].isdigit():
            values[parts[0]] = int(parts[1]) // 1024  # kB -> MiB
    return {"total_mb": values.get("MemTotal", 0), "available_mb": values.get("MemAvailable", 0)}
