"""Every version the cluster wizard installs, in one place, with where its pairing comes from.

Changing one means re-checking the tables cited here: Volcano's Kubernetes compatibility
table, containerd's Kubernetes support table, and the device plugins' release pages.
Download URLs are built here, by the node's architecture (an arm64 GH200 gets arm64).
"""

from __future__ import annotations

import re

from core.errors import InvalidInput
from core.nodes.blockers import RELEASE_ARCH

# k3s (Kubernetes 1.31): https://github.com/k3s-io/k3s/releases/tag/v1.31.4%2Bk3s1
K3S_VERSION = "v1.31.4+k3s1"
K3S_RELEASES = "https://github.com/k3s-io/k3s/releases/download"

# Volcano: the README's "Kubernetes compatibility" table (volcano-sh/volcano README.md, and
# its "Kubernetes Compatibility Archive" page) lists Kubernetes 1.31 from Volcano v1.11 on
# (v1.10 stops at 1.30; v1.12 adds 1.32). Pair by Kubernetes minor.
VOLCANO_FOR_K8S = {"1.30": "v1.10.0", "1.31": "v1.11.0", "1.32": "v1.12.0"}
VOLCANO_SOURCE = "https://github.com/volcano-sh/volcano#kubernetes-compatibility"
# sha256 of installer/volcano-development.yaml at each tag of github.com/volcano-sh/volcano
# (read from the repository at the tag); the paired release for K3S_VERSION ships with
# geotrain (core/bootstrap/volcano-v1.11.0.yaml), the others are downloaded and checked.
VOLCANO_MANIFEST_SHA256 = {
    "v1.10.0": "98fbe65dd8344308284e91ada82fb025b0514fe6b173ea02013398b236876b2c",
    "v1.11.0": "4610903de0d1a0e6c032604d5f909bbed51a63b6886ca488f8acdb8974edfef3",
    "v1.12.0": "09ec9fd4679806b89938f0c6fe068eaebf428f237ff1e1992b63a82a94efcee2",
}

# containerd: RELEASES.md, "Kubernetes Support" (containerd/containerd RELEASES.md):
#   1.30: 2.1.0+, 2.0.0+, 1.7.13+, 1.6.28+   1.31: 2.1.0+, 2.0.0+, 1.7.20+, 1.6.34+
#   1.32: 2.1.0+, 2.0.1+, 1.7.24+, 1.6.36+
# Below 1.6 there is no CRI v1 (the deprecated table: v1.4 is CRI v1alpha2 only).
CONTAINERD_FLOOR = {
    "1.30": {"1.6": (1, 6, 28), "1.7": (1, 7, 13), "2.0": (2, 0, 0), "2.1": (2, 1, 0)},
    "1.31": {"1.6": (1, 6, 34), "1.7": (1, 7, 20), "2.0": (2, 0, 0), "2.1": (2, 1, 0)},
    "1.32": {"1.6": (1, 6, 36), "1.7": (1, 7, 24), "2.0": (2, 0, 1), "2.1": (2, 1, 0)},
}
CONTAINERD_SOURCE = "https://github.com/containerd/containerd/blob/main/RELEASES.md#kubernetes-support"
# 1.7.x keeps our `version = 2` config format; 1.7.24 is supported for 1.31 and 1.32.
CONTAINERD_VERSION = "1.7.24"
CONTAINERD_RELEASES = "https://github.com/containerd/containerd/releases/download"

# The sha256 of each release file geotrain installs, by (release version, file name): a
# download or an air-gap bundle file is installed only when it matches (core.bootstrap.checksums).
# A value is pinned only where a public source other than the release itself gives it for
# exactly that version, cited beside it; a file without one needs the user's `--sha256
# NAME=HEX` (or --insecure-skip-checksum). Never the checksum list served beside the file.
RELEASE_SHA256 = {
    # kubernetes-sigs/kubespray roles/kubespray-defaults/defaults/main/checksums.yml,
    # containerd_archive_checksums (commit 54a01f277, "Containerd upgrade to 1.7.24")
    ("1.7.24", "containerd-1.7.24-linux-amd64.tar.gz"):
        "1a94f15139f37633f39e24f08a4071f4533b285df3cbee6478972d26147bcaef",
    ("1.7.24", "containerd-1.7.24-linux-arm64.tar.gz"):
        "420406d2b34ebb422ab3755fbeede59bf3bfcfccf5cfa584b558c93769d99064",
    # k3s v1.31.4+k3s1 (k3s, k3s-arm64, k3s-airgap-images-<arch>.tar): no public source
    # besides the release's own sha256sum-<arch>.txt was found: not pinned.
}

# NVIDIA: https://github.com/NVIDIA/k8s-device-plugin/releases/tag/v0.17.0
NVIDIA_PLUGIN_VERSION = "v0.17.0"
NVIDIA_PLUGIN_IMAGE = f"nvcr.io/nvidia/k8s-device-plugin:{NVIDIA_PLUGIN_VERSION}"
# AMD: the ROCm plugin's helm index (ROCm/k8s-device-plugin index.yaml) lists appVersion
# 1.31.0.7 (2025-06); the image is tagged the same. Never the moving `master` manifest.
AMD_PLUGIN_VERSION = "1.31.0.7"
AMD_PLUGIN_IMAGE = f"docker.io/rocm/k8s-device-plugin:{AMD_PLUGIN_VERSION}"

# `uname -m` -> the release asset suffix k3s and containerd use.
ARCHES = RELEASE_ARCH  # one table: the node policy blocks what has no release


class UnsupportedArch(ValueError):
    """A node whose CPU architecture has no k3s/containerd release asset."""


def k8s_minor(k3s_version: str) -> str:
    """'v1.31.4+k3s1' -> '1.31'."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.\d+(?:[+-][0-9A-Za-z.+-]*)?", k3s_version)
    if not match:
        raise ValueError(f"not a k3s version: {k3s_version!r}")
    return f"{match[1]}.{match[2]}"


def volcano_for(k3s_version: str) -> str:
    minor = k8s_minor(k3s_version)
    if minor not in VOLCANO_FOR_K8S:
        raise InvalidInput(f"no Volcano release is paired with Kubernetes {minor} ({VOLCANO_SOURCE})",
                           f"use a k3s release for Kubernetes {', '.join(sorted(VOLCANO_FOR_K8S))}")
    return VOLCANO_FOR_K8S[minor]


def release_arch(machine: str | None) -> str:
    """The asset suffix for `uname -m`; unknown (e.g. a dry run) means amd64."""
    if not machine:
        return "amd64"
    if machine not in ARCHES:
        raise UnsupportedArch(f"CPU architecture {machine!r} has no k3s/containerd release "
                              f"(supported: {', '.join(sorted(set(ARCHES.values())))})")
    return ARCHES[machine]


def k3s_urls(version: str, arch: str) -> tuple[str, str]:
    """(binary, checksum list) for one architecture: amd64's asset has no suffix."""
    base = f"{K3S_RELEASES}/{version.replace('+', '%2B')}"
    binary = "k3s" if arch == "amd64" else f"k3s-{arch}"
    return f"{base}/{binary}", f"{base}/sha256sum-{arch}.txt"


def k3s_asset(arch: str) -> str:
    return "k3s" if arch == "amd64" else f"k3s-{arch}"


def airgap_images(arch: str) -> str:
    """The plain-tar image bundle: `ctr images import` does not decompress zstd."""
    return f"k3s-airgap-images-{arch}.tar"


def containerd_tarball(arch: str, version: str = CONTAINERD_VERSION) -> str:
    return f"containerd-{version}-linux-{arch}.tar.gz"


def containerd_urls(arch: str, version: str = CONTAINERD_VERSION) -> tuple[str, str]:
    name = containerd_tarball(arch, version)
    base = f"{CONTAINERD_RELEASES}/v{version}"
    return f"{base}/{name}", f"{base}/{name}.sha256sum"


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """'1.6.20~ds1' / 'v1.7.24' / '1.7.24-1' -> (1, 6, 20); None if unreadable."""
    match = re.match(r"v?(\d+)\.(\d+)\.(\d+)", text or "")
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def containerd_supported(version: str | None, k3s_version: str) -> bool:
    """Does containerd `version` meet containerd's floor for this Kubernetes minor?"""
    have = parse_version(version)
    floors = CONTAINERD_FLOOR.get(k8s_minor(k3s_version))
    if not have or not floors:
        return False
    floor = floors.get(f"{have[0]}.{have[1]}")
    if floor is None:  # a newer line than the table knows is fine; an older one is not
        return have > max(floors.values())
    return have >= floor


def containerd_floor_text(k3s_version: str) -> str:
    floors = CONTAINERD_FLOOR.get(k8s_minor(k3s_version), {})
    return ", ".join(".".join(map(str, v)) + "+" for v in sorted(floors.values()))
