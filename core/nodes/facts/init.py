"""The init system: PID 1's name (systemd decides how the wizard runs its daemons)."""

from __future__ import annotations

COMMAND = "cat /proc/1/comm"


def parse(output: str) -> dict:
    pid1 = output.strip().splitlines()[0].strip() if output.strip() else ""
    return {"pid1": pid1, "systemd": pid1 == "systemd"}
