"""Which container image a set of nodes runs: the one answer that the pod command, the
wizard's pre-pull step and the requirements check share.

By default geotrain needs no registry of its own: a node runs the official upstream
PyTorch image for its GPU vendor, and geotrain delivers the recipes source (ConfigMaps)
and their pure-Python dependencies (installed once per node at pod start; see
core.kubernetes.recipes_delivery). A team with its own image (`--image`, `image:` in the
spec, or the cluster's `image`) gets exactly that image on every node, its AMD nodes the
`-rocm` tag (core.kubernetes.names.rocm_variant), and nothing is delivered: such an image
carries the recipes and their dependencies itself (recipes/Dockerfile shows how).

The tags below are published upstream (checked 2026-11 against public Dockerfiles that
build FROM them, e.g. `FROM pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime` and
`FROM rocm/pytorch:rocm6.4.1_ubuntu24.04_py3.12_pytorch_release_2.7.1`; Docker Hub
pages hub.docker.com/r/pytorch/pytorch/tags and hub.docker.com/r/rocm/pytorch/tags).
Both carry torch 2.7.1, so a job mixing vendors (gloo) runs one torch release.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

# The CUDA build runs on CPU-only nodes too (torch falls back to CPU without a driver).
UPSTREAM_IMAGES = {
    "nvidia": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
    "amd": "rocm/pytorch:rocm6.4.1_ubuntu24.04_py3.12_pytorch_release_2.7.1",
    "cpu": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
}
VENDORS = tuple(UPSTREAM_IMAGES)


@dataclass(frozen=True)
class ImageChoice:
    """The image a node of one vendor runs, and whether geotrain delivers the recipes to it."""

    image: str
    delivered: bool  # True: upstream image + recipes ConfigMaps + per-node Python deps


def _rocm_tag(image: str) -> str:
    """A custom image's AMD build (tag suffixed `-rocm`), digests as given; the same rule
    as core.kubernetes.names.rocm_variant, which also validates the reference."""
    if "@" in image:
        return image
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    return f"{name}:{tag or 'latest'}-rocm"


def image_for(vendor: str, custom: str | None = None) -> ImageChoice:
    """The image of a node whose GPUs are `vendor` ("nvidia" | "amd" | "cpu")."""
    if vendor not in UPSTREAM_IMAGES:
        raise ValueError(f"unknown GPU vendor {vendor!r}")
    if custom:
        return ImageChoice(_rocm_tag(custom) if vendor == "amd" else custom, delivered=False)
    return ImageChoice(UPSTREAM_IMAGES[vendor], delivered=True)


def images_for_nodes(vendors: Iterable[str], custom: str | None = None) -> dict[str, ImageChoice]:
    """vendor -> ImageChoice for every vendor among a node set's nodes (one entry per vendor)."""
    return {vendor: image_for(vendor, custom) for vendor in sorted(set(vendors), key=VENDORS.index)}


def custom_image(spec_image: str | None, cluster_config: dict) -> str | None:
    """The team's own image, if any: the workspace's, else the cluster's."""
    return spec_image or cluster_config.get("image") or None


def vendor_of_facts(facts: dict) -> str:
    """A node's vendor from its pool facts (facts["gpus"]: [{"name", "vendor"?}]): NVIDIA
    wins on a mixed node, as in core.kubernetes.node_groups."""
    names = []
    for gpu in facts.get("gpus") or []:
        text = " ".join(str(gpu.get(k, "")) for k in ("vendor", "name")) if isinstance(gpu, dict) else str(gpu)
        names.append(text.lower())
    if not names:
        return "cpu"
    amd = [n for n in names if "amd" in n or "instinct" in n or "radeon" in n]
    return "amd" if len(amd) == len(names) else "nvidia"


def qualified(image: str) -> str:
    """The fully qualified reference `ctr images pull` needs (Docker Hub names expanded)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if rest else f"docker.io/library/{image}"
