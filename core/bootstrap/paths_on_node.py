"""Files geotrain keeps on nodes for its own use (under /run/geotrain: per boot)."""

from __future__ import annotations

from pathlib import Path

from core.bootstrap.plan import NodeTarget

RUN_DIR = "/run/geotrain"
NETPROBE = f"{RUN_DIR}/netprobe.py"
# The system Python, not a user's pyenv/conda shim that may sit first on PATH.
PYTHON = "$(test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)"
NETPROBE_RUN = f"{PYTHON} {NETPROBE}"


def ensure_netprobe(target: NodeTarget) -> str:
    """Copy the network probe to the node if it differs; returns how to run it there."""
    text = (Path(__file__).parent / "netprobe.py").read_text()
    target.ensure_file(NETPROBE, text, mode=0o644)
    return NETPROBE_RUN
