"""Operating system, kernel and architecture: `uname` plus /etc/os-release.

`apt` says whether the wizard can install packages (Debian, Ubuntu and their kin)."""

from __future__ import annotations

COMMAND = "uname -srm; cat /etc/os-release"


def parse(output: str) -> dict:
    lines = output.splitlines()
    first = lines[0].split() if lines else []
    release: dict[str, str] = {}
    for line in lines[1:]:
        key, sep, value = line.partition("=")
        if sep and key.strip().isupper():
            release[key.strip()] = value.strip().strip('"').strip("'")
    like = f"{release.get('ID', '')} {release.get('ID_LIKE', '')}"
    return {
        "system": first[0] if first else "unknown",
        "kernel": first[1] if len(first) > 1 else "",
        "arch": first[2] if len(first) > 2 else "",
        "os_id": release.get("ID", ""),
        "os_version": release.get("VERSION_ID", ""),
        "os_name": release.get("PRETTY_NAME") or release.get("NAME", ""),
        "os_like": release.get("ID_LIKE", ""),
        "apt": "debian" in like or "ubuntu" in like,
    }
