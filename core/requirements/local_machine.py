"""This machine's facts for the `local` cluster, in the node pool's shape: free disk where
workspaces run, memory available now, GPUs (nvidia-smi). Same parsers as the pool's."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from core.nodes.facts import gpus, memory
from core.state import paths

MEMINFO = Path("/proc/meminfo")


def local_facts(workspaces: Path | None = None) -> dict:
    folder = Path(workspaces) if workspaces else paths.workspaces_dir()
    usage = shutil.disk_usage(folder)
    try:
        meminfo = memory.parse(MEMINFO.read_text())
    except OSError:
        meminfo = {"total_mb": 0, "available_mb": 0}
    return {"disk": {"free_gb": round(usage.free / 2**30, 1), "path": str(folder)},
            "memory": meminfo, "gpus": _nvidia(), "gathered_at": time.time()}


def _nvidia() -> list[dict]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["sh", "-c", gpus.NVIDIA_COMMAND], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return gpus.parse_nvidia(out)["gpus"]
