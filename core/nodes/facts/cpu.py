"""CPU model and core count (lscpu where present; /proc/cpuinfo as the fallback)."""

from __future__ import annotations

# ARM kernels put no model name in /proc/cpuinfo; only then is lscpu asked
COMMAND = ("nproc; grep -m1 -iE '^(model name|cpu model)' /proc/cpuinfo || "
           "lscpu | grep -E '^Model name:'")


def parse(output: str) -> dict:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    cores = int(lines[0]) if lines and lines[0].isdigit() else 0
    model = ""
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep and value.strip() and value.strip() != "-":
            model = model or value.strip()
    return {"model": model or "unknown", "cores": cores}
