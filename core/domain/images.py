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

Architectures: a node runs an image built for its CPU (core.domain.architectures). Neither image
above has an arm64 build: pytorch/pytorch on Docker Hub is amd64-only (github.com/pytorch/pytorch
issues #145716 and #157139: "only nvidia cuda option for GH200/GB200 images"), and ROCm publishes
rocm/pytorch for amd64 only (hub.docker.com/r/rocm/pytorch/tags lists linux/amd64). NVIDIA's NGC
PyTorch image is multi-arch (linux/amd64 and linux/arm64 under one tag: Grace Hopper/Blackwell
Dockerfiles build FROM nvcr.io/nvidia/pytorch:25.04-py3; its release notes: torch 2.7.0a0, CUDA
12.9, Python 3.12), so arm64 NVIDIA and CPU nodes (GH200) run that. An AMD arm64 node has no
upstream image: a workspace that would run one is refused in one line naming `--image`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from core.domain.architectures import DEFAULT_ARCH
from core.errors import InvalidInput

# The CUDA build runs on CPU-only nodes too (torch falls back to CPU without a driver).
UPSTREAM_IMAGES = {
    "nvidia": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
    "amd": "rocm/pytorch:rocm6.4.1_ubuntu24.04_py3.12_pytorch_release_2.7.1",
    "cpu": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
}
VENDORS = tuple(UPSTREAM_IMAGES)
NGC_PYTORCH = "nvcr.io/nvidia/pytorch:25.04-py3"
# The platforms each default image is published for (sources in the module docstring).
IMAGE_ARCHES = {UPSTREAM_IMAGES["nvidia"]: ("amd64",), UPSTREAM_IMAGES["amd"]: ("amd64",),
                NGC_PYTORCH: ("amd64", "arm64")}
# The CUDA release each default NVIDIA image is built with (its tag; NGC 25.04's release notes),
# which sets the driver it needs (core.requirements.cuda_driver).
IMAGE_CUDA = {UPSTREAM_IMAGES["nvidia"]: "12.8", NGC_PYTORCH: "12.9"}
# (vendor, arch) -> the default image: the amd64 images above, NGC's multi-arch build on arm64.
DEFAULT_IMAGES = {**{(vendor, "amd64"): image for vendor, image in UPSTREAM_IMAGES.items()},
                  ("nvidia", "arm64"): NGC_PYTORCH, ("cpu", "arm64"): NGC_PYTORCH}


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


def image_for(vendor: str, custom: str | None = None, arch: str = DEFAULT_ARCH) -> ImageChoice:
    """The image of a node whose GPUs are `vendor` ("nvidia" | "amd" | "cpu") and whose CPU is `arch`.
    A custom image is the team's, for whatever architectures they built it; a default must be
    published for `arch`, or the deploy is refused naming --image."""
    if vendor not in UPSTREAM_IMAGES:
        raise ValueError(f"unknown GPU vendor {vendor!r}")
    if custom:
        return ImageChoice(_rocm_tag(custom) if vendor == "amd" else custom, delivered=False)
    image = DEFAULT_IMAGES.get((vendor, arch))
    if image is None:
        kind = {"nvidia": "NVIDIA GPUs", "amd": "AMD GPUs", "cpu": "no GPU"}[vendor]
        have = ", ".join(sorted({a for (v, a) in DEFAULT_IMAGES if v == vendor}))
        raise InvalidInput(f"no upstream PyTorch image runs {kind} on {arch} nodes (published for {have} only)",
                           f"deploy with --image NAME, a build of your own for {arch} (recipes/Dockerfile shows how)")
    assert arch in IMAGE_ARCHES.get(image, (arch,)), (image, arch)
    return ImageChoice(image, delivered=True)


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
