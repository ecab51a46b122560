"""containerd already installed (reused by the cluster wizard) and its version."""

from __future__ import annotations

COMMAND = ("p=$(command -v containerd) && echo \"bin $p\" && containerd --version; "
           "[ -S /run/containerd/containerd.sock ] && echo running; true")


def parse(output: str) -> dict:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    version = None
    for line in lines:
        parts = line.split()
        if parts[0] == "containerd" and len(parts) >= 3 and version is None:
            version = parts[2].lstrip("v")  # "containerd <repo> 1.6.20~ds1 <rev>"
    return {"installed": any(ln.startswith("bin ") for ln in lines), "version": version,
            "running": "running" in lines}
