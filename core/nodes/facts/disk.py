"""Size and free space of the root filesystem, in GiB (`df -P` is the portable form)."""

from __future__ import annotations

COMMAND = "df -Pk /"


def parse(output: str) -> dict:
    lines = output.strip().splitlines()
    parts = lines[-1].split() if lines else []
    if len(parts) < 4 or not parts[1].isdigit() or not parts[3].isdigit():
        return {"total_gb": 0.0, "free_gb": 0.0}
    return {"total_gb": round(int(parts[1]) / 2**20, 1), "free_gb": round(int(parts[3]) / 2**20, 1)}
