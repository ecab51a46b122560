"""Is each NVIDIA node's driver new enough for the CUDA its image is built with?

CUDA's minor version compatibility (docs.nvidia.com/deploy/cuda-compatibility/
minor-version-compatibility.html, Table 1): an application built with CUDA 12.x runs on a
driver >= 525, one built with 13.x on >= 580, 11.x on >= 450; below that, torch in the pod
finds no usable GPU. The image's CUDA is known for geotrain's default images
(core.domain.images.IMAGE_CUDA); a team's own image is not judged.
"""

from __future__ import annotations

import re

from core.domain.images import IMAGE_CUDA
from core.requirements.report import OK, UNKNOWN, Finding

DRIVER_FLOOR = {11: 450, 12: 525, 13: 580}  # CUDA major -> the oldest driver branch it runs on


def driver_branch(text: object) -> int | None:
    """'570.86.15' -> 570; None for anything else."""
    match = re.fullmatch(r"(\d{2,4})(?:\.\d+){0,3}", str(text or "").strip())
    return int(match[1]) if match else None


def driver_findings(name: str, facts: dict, image: str) -> list[Finding]:
    """One finding for an NVIDIA node that runs an image of known CUDA; [] otherwise."""
    cuda = IMAGE_CUDA.get(image)
    nvidia = [g for g in facts.get("gpus") or [] if isinstance(g, dict) and g.get("vendor") == "nvidia"]
    if not cuda or not nvidia:
        return []
    floor = DRIVER_FLOOR[int(cuda.split(".")[0])]
    needed = f"driver >= {floor} (CUDA {cuda} in {image})"
    branches = {driver_branch(g.get("driver")) for g in nvidia}
    if None in branches:
        return [Finding(name, "NVIDIA driver", "not known", needed, f"`geotrain nodes refresh {name}`", UNKNOWN)]
    have = min(b for b in branches if b is not None)
    found = ", ".join(sorted({str(g.get("driver")) for g in nvidia}))
    if have >= floor:
        return [Finding(name, "NVIDIA driver", found, needed, verdict=OK)]
    return [Finding(name, "NVIDIA driver", found, needed,
                    f"install NVIDIA driver {floor} or newer on {name}, or deploy with --image built for CUDA "
                    f"{_cuda_for(have)} or older")]


def _cuda_for(branch: int) -> str:
    majors = [major for major, floor in DRIVER_FLOOR.items() if floor <= branch]
    return f"{max(majors)}.x" if majors else "11.x"
