"""What a node still fetches when the cluster is built from an air-gap bundle (issue 41 item 3).

`--k3s-bundle DIR` brings k3s, its own images (k3s-airgap-images-<arch>.tar) and the containerd
release; everything else a node runs still comes from a registry, an apt repository or PyPI.
Preflight says so per node in one line, so an offline site knows exactly what to mirror or
put in the bundle's images/ folder (core.bootstrap.bundle_images) before the deploy stalls on it:
  - Volcano's images (listed in its manifest; applied with IfNotPresent, core.bootstrap.volcano),
  - the node's device plugin image (core.bootstrap.versions),
  - the training image for its vendor and architecture (core.domain.images),
  - the apt packages geotrain installs where missing (runc, wireguard-tools, wireguard-go without
    the kernel module, nvidia-container-toolkit from NVIDIA's repository),
  - the recipes' locked PyPI dependencies, installed per node at a pod's first start on the
    default images (PyPI, or the cluster's pip_index_url mirror).
"""

from __future__ import annotations

import re
from pathlib import Path

from core.bootstrap import bundle_images, versions, volcano
from core.bootstrap.plan import ClusterPlan
from core.domain.architectures import node_arch
from core.domain.images import image_for, qualified, vendor_of_facts
from core.errors import InvalidInput
from core.nodes.facts import gpus

_IMAGE_LINE = re.compile(r"^[ \t]*(?:-[ \t]+)?image:[ \t]*([^\s#]+)[ \t]*$", re.MULTILINE)
PLUGIN_IMAGES = {"nvidia": versions.NVIDIA_PLUGIN_IMAGE, "amd": versions.AMD_PLUGIN_IMAGE}


def volcano_images(version: str) -> list[str]:
    """The images the Volcano release's manifest runs (the shipped copy), else its three controllers."""
    shipped = volcano.shipped_manifest(version)
    if shipped is None:
        return [f"docker.io/volcanosh/vc-{part}:{version}"
                for part in ("webhook-manager", "controller-manager", "scheduler")]
    return sorted(set(_IMAGE_LINE.findall(shipped.decode())))


def images(plan: ClusterPlan, facts: dict) -> list[str]:
    """Every image this node may run that the bundle does not carry (its images/ tars included)."""
    arch = node_arch(facts)
    found = volcano_images(plan.volcano.version)
    vendors = gpus.vendors(facts)
    found += [PLUGIN_IMAGES[v] for v in ("nvidia", "amd") if v in vendors]
    missing = []
    try:
        found.append(image_for(vendor_of_facts(facts), plan.image, arch).image)
    except InvalidInput:
        missing.append(f"a training image for {arch} of your own (--image)")
    carried = bundle_images.bundled_refs(plan.k3s.bundle, arch)
    tarball = Path(plan.k3s.bundle or ".") / versions.airgap_images(arch)
    if not tarball.is_file():
        missing.append(f"k3s's own images ({tarball.name} is not in the bundle)")
    return [ref for ref in found if qualified(ref) not in carried] + missing


def packages(facts: dict) -> list[str]:
    """The apt packages geotrain installs on this node where they are missing."""
    wireguard = facts.get("wireguard") or {}
    wanted = ["runc"] + ([] if wireguard.get("tools") else ["wireguard-tools"])
    wanted += [] if wireguard.get("kernel_module", True) else ["wireguard-go"]
    return wanted + (["nvidia-container-toolkit (NVIDIA's apt repository)"]
                     if "nvidia" in gpus.vendors(facts) else [])


def needs_line(plan: ClusterPlan, facts: dict) -> str:
    """One line: what this node still fetches though k3s and containerd come from the bundle."""
    wanted = images(plan, facts)
    shown = (f"images {', '.join(wanted)} (mirror them, or put their tars in the bundle's "
             f"{bundle_images.SUBDIR}/ folder)") if wanted else "no image"
    pypi = "" if plan.image else ("; PyPI (or the cluster's pip_index_url): the recipes' locked "
                                  "dependencies, at a workspace's first pod on the node")
    return f"offline, it still needs: {shown}; apt: {', '.join(packages(facts))} where missing{pypi}"
