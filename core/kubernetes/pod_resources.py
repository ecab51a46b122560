"""Memory a workspace pod asks for, and the size of its /dev/shm, from the model's size.

Without a limit a runaway pod takes its node down with it; without a bound, /dev/shm (a
memory-backed emptyDir, charged to the container's memory) grows until the node evicts
everything on it. The numbers are an estimate of host memory, stated here in one place:
GPU pods keep DiLoCo's fp32 global copy, outer momentum and checkpoint staging on the host
(~16 bytes per parameter per process); CPU pods also hold the model, gradients and AdamW
moments there (~32 bytes).
"""

from __future__ import annotations

import math
from typing import Any

from core.domain import recipe_catalog

GIB = 2**30
POD_BASE_GIB = 2  # the shell, torchrun's agent, page cache for the config and data
PROCESS_BASE_GIB = 2  # python + torch (+ CUDA/ROCm host context) + a batch in flight
HOST_BYTES_PER_PARAM = {"cpu": 32, "gpu": 16}
SHM_PER_PROCESS_GIB = 1  # NCCL/RCCL intra-node buffers and data-loader hand-off
FALLBACK_PARAMS = 1_500_000_000  # an unknown model/size: assume the largest catalog size


def model_params(model: str, size: str) -> int:
    """Trainable parameters from recipes/params.yaml; a conservative guess when unknown."""
    count = recipe_catalog.param_counts().get(model, {}).get(size)
    return int(count) if isinstance(count, int) and count > 0 else FALLBACK_PARAMS


def shm_gib(processes: int) -> int:
    return SHM_PER_PROCESS_GIB * max(processes, 1)


def memory_gib(params: int, processes: int, vendor: str) -> int:
    """Whole GiB a pod of `processes` ranks needs, its /dev/shm included."""
    per_param = HOST_BYTES_PER_PARAM["cpu" if vendor == "cpu" else "gpu"]
    per_process = PROCESS_BASE_GIB + params * per_param / GIB
    return math.ceil(POD_BASE_GIB + max(processes, 1) * per_process) + shm_gib(processes)


def memory_resources(model: str, size: str, processes: int, vendor: str) -> dict[str, Any]:
    """requests == limits for memory: the scheduler reserves what the pod may use, so a
    busy node never OOM-kills a training pod that stayed within its limit."""
    amount = f"{memory_gib(model_params(model, size), processes, vendor)}Gi"
    return {"requests": {"memory": amount}, "limits": {"memory": amount}}


def shm_volume(processes: int) -> dict[str, Any]:
    """/dev/shm as a memory-backed emptyDir with a bound (counted in the memory limit)."""
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gib(processes)}Gi"}}
