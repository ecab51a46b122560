"""What a workspace needs on one machine, from its model, size, config and placement.

The numbers are estimates, stated here once (a real run that needs more would say so
hours in, which is what this check is for):
- the dataset on disk: ImageNet-1k (~155 GB of archives plus the unpacked tree) and
  LibriSpeech (archives, unpacked .flac and feature cache) each want 250 GB; C4 is
  streamed and only its tokens are cached; synthetic data needs nothing;
- checkpoints: every rank saves its own (weights, AdamW moments, DiLoCo's global copy and
  outer momentum: ~20 bytes per parameter), `checkpoint.keep` of them plus one being written;
- host memory: what the Kubernetes pod asks for (core.kubernetes.pod_resources), and on
  `local` 512 MiB per worker plus the same per-parameter bytes;
- GPU memory per GPU: fp32 weights, gradients and AdamW moments (16 bytes per parameter)
  plus 2 GiB for the CUDA/ROCm context and a batch of activations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from core.domain.limits import LOCAL_WORKER_MEMORY
from core.kubernetes.pod_resources import HOST_BYTES_PER_PARAM, memory_gib, model_params
from core.requirements.report import gb

GB = 1e9
GIB = 2**30
CHECKPOINT_BYTES_PER_PARAM = 20
GPU_BYTES_PER_PARAM = 16
GPU_BASE_GIB = 2.0
TOKEN_BYTES = 4  # uint32 in the cache when the vocabulary is large (uint16 otherwise)
LOGS_GB = 1.0  # logs, metrics, W&B's offline run directory
IMAGE_GB = {"nvidia": 10.0, "amd": 25.0, "cpu": 2.0}  # an unpacked PyTorch image per vendor


@dataclass(frozen=True)
class Dataset:
    name: str
    gb: float
    gated_repo: str | None = None  # a Hub dataset whose terms must be accepted


# data.source -> what it takes on disk; sources not named here are generated in memory
DATASETS = {
    "imagenet": Dataset("ImageNet-1k", 250.0, "ILSVRC/imagenet-1k"),
    "librispeech": Dataset("LibriSpeech", 250.0),
    "ogbn-arxiv": Dataset("ogbn-arxiv", 2.0),
}


@dataclass(frozen=True)
class Needs:
    """One machine's share of a workspace."""

    processes: int  # ranks on the machine
    vendor: str  # "nvidia" | "amd" | "cpu"
    dataset: Dataset | None
    dataset_gb: float
    checkpoint_gb: float
    image_gb: float  # 0 on `local`
    memory_gib: float
    gpu_memory_gib: float  # per GPU; 0 on CPU machines

    @property
    def disk_gb(self) -> float:
        return self.dataset_gb + self.checkpoint_gb + self.image_gb + LOGS_GB

    def disk_parts(self) -> str:
        parts = [(what, size) for what, size in (("dataset", self.dataset_gb), ("checkpoints", self.checkpoint_gb),
                                                 ("image", self.image_gb)) if size >= 0.1]
        return " + ".join(f"{what} {gb(size)}" for what, size in parts) + (" + logs" if parts else "logs")


def dataset_of(config: dict[str, Any]) -> Dataset | None:
    data = config.get("data") or {}
    source = data.get("source")
    if source in DATASETS:
        return DATASETS[source]
    if source == "c4":
        return Dataset("C4 tokens", 0.0, None)
    return None


def _dataset_gb(config: dict[str, Any], processes: int, steps: int) -> float:
    data = config.get("data") or {}
    dataset = dataset_of(config)
    if dataset is None:
        return 0.0
    if data.get("source") == "c4":
        budget = data.get("max_tokens") or steps * int(data.get("batch_size") or 1) * int(data.get("seq_len") or 1)
        return processes * budget * TOKEN_BYTES / GB
    return dataset.gb


def needs_for(config: dict[str, Any], model: str, size: str, steps: int, processes: int,
              vendor: str, local: bool, params: int | None = None) -> Needs:
    """`params` for a model not in the catalog (a custom-training command: 0, its size unknown)."""
    params = model_params(model, size) if params is None else params
    keep = (config.get("checkpoint") or {}).get("keep", 2)
    copies = (int(keep) if isinstance(keep, int) and keep > 0 else 1) + 1
    if local:
        per_param = HOST_BYTES_PER_PARAM["cpu" if vendor == "cpu" else "gpu"]
        memory = processes * (LOCAL_WORKER_MEMORY + params * per_param) / GIB
    else:
        memory = memory_gib(params, processes, vendor)
    gpu = 0.0 if vendor == "cpu" else GPU_BASE_GIB + params * GPU_BYTES_PER_PARAM / GIB
    return Needs(processes=processes, vendor=vendor, dataset=dataset_of(config),
                 dataset_gb=_dataset_gb(config, processes, steps),
                 checkpoint_gb=processes * copies * params * CHECKPOINT_BYTES_PER_PARAM / GB,
                 image_gb=0.0 if local else IMAGE_GB.get(vendor, IMAGE_GB["nvidia"]),
                 memory_gib=math.ceil(memory * 10) / 10, gpu_memory_gib=math.ceil(gpu * 10) / 10)
