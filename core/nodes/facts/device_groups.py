"""The host groups that own the GPU device files: `video` and `render` (AMD's /dev/kfd and
/dev/dri/renderD*). Their ids differ by distribution and release (render is 104, 109, 110 or
992 on hosts seen upstream: ROCm/k8s-device-plugin issues, ROCm's install docs), so an AMD pod
is given the ids its own nodes report, not a guess."""

from __future__ import annotations

import re

COMMAND = "getent group video render"
NAMES = ("video", "render")


def parse(output: str) -> dict[str, int]:
    """`getent group` lines (name:x:gid:members) -> {"video": 44, "render": 109}; missing groups left out."""
    found: dict[str, int] = {}
    for line in output.splitlines():
        parts = line.strip().split(":")
        if len(parts) >= 3 and parts[0] in NAMES and re.fullmatch(r"\d{1,10}", parts[2]):
            gid = int(parts[2])
            if 0 < gid < 2**31:
                found[parts[0]] = gid
    return found
