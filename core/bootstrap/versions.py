"""Every version the cluster wizard installs, in one place, with where its pairing comes from.

Changing one means re-checking the tables cited here: Volcano's Kubernetes compatibility
table, containerd's Kubernetes support table, and the device plugins' release pages.
SUPPORT below keeps each pin's end of life (or, where upstream publishes none, the date by
which the pin must be looked at again) with its source and when it was read;
tests/bootstrap/test_versions_support.py fails once one has passed.
Download URLs are built here, by the node's architecture (an arm64 GH200 gets arm64).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

from core.errors import InvalidInput
from core.nodes.blockers import RELEASE_ARCH

# k3s (Kubernetes 1.35): the release-1.35 branch's "Update to v1.35.5-k3s1" (k3s-io/k3s#14050,
# merged), tagged v1.35.5+k3s1. Kubernetes 1.35's kubelet refuses cgroup v1 hosts (KEP-5573,
# kubernetes/kubernetes#134298: failCgroupV1 defaults to true): the preflight blocks them.
# Kubernetes 1.31 (v1.31.4+k3s1 before) reached end of life on 2025-10-28.
K3S_VERSION = "v1.35.5+k3s1"
K3S_RELEASES = "https://github.com/k3s-io/k3s/releases/download"

# Volcano: the README's "Kubernetes compatibility" table (volcano-sh/volcano README.md at
# master, read 2026-11-28 from commit ed72c7c81 of 2026-08-20) ticks Kubernetes 1.31 from
# v1.11, 1.32 from v1.12, 1.33 from v1.13, 1.34 from v1.14 and 1.35 from v1.15 (no release
# ticks 1.36: only master). Pair by Kubernetes minor, each the newest patch of its line.
VOLCANO_FOR_K8S = {"1.30": "v1.10.0", "1.31": "v1.11.0", "1.32": "v1.12.0", "1.33": "v1.13.3",
                   "1.34": "v1.14.4", "1.35": "v1.15.1"}
VOLCANO_SOURCE = "https://github.com/volcano-sh/volcano#kubernetes-compatibility"
# sha256 of installer/volcano-development.yaml at each tag of github.com/volcano-sh/volcano
# (read from the repository at the tag); the paired release for K3S_VERSION ships with
# geotrain (core/bootstrap/volcano-v1.15.1.yaml, from tag v1.15.1 = commit 0a56ed331), and so
# does v1.11.0 (clusters built before keep their k3s and its Volcano); others are downloaded
# and checked.
VOLCANO_MANIFEST_SHA256 = {
    "v1.10.0": "98fbe65dd8344308284e91ada82fb025b0514fe6b173ea02013398b236876b2c",
    "v1.11.0": "4610903de0d1a0e6c032604d5f909bbed51a63b6886ca488f8acdb8974edfef3",
    "v1.12.0": "09ec9fd4679806b89938f0c6fe068eaebf428f237ff1e1992b63a82a94efcee2",
    "v1.13.3": "7159e2d75b81ad29f688a554b014c37ebe45bab8a72bdaec631b5b6f3b2d978b",
    "v1.14.4": "fe5626e9a3f3f363e9426b9c3c340a630892b0fb29e303be463239fdd11c974b",
    "v1.15.1": "b5fb45a57bcd1132be7055354999d244266873710609afd1f162005772d15c41",
}

# containerd: RELEASES.md, "Kubernetes Support" (containerd/containerd RELEASES.md; 1.33-1.36
# read 2026-11-28 at commit 301026e58 of 2026-08-22):
#   1.30: 2.1.0+, 2.0.0+, 1.7.13+, 1.6.28+   1.31: 2.1.0+, 2.0.0+, 1.7.20+, 1.6.34+
#   1.32: 2.1.0+, 2.0.1+, 1.7.24+, 1.6.36+   1.33: 2.1.0+, 2.0.4+, 1.7.24+, 1.6.36+
#   1.34: 2.1.3+, 2.0.6+, 1.7.28+, 1.6.39+   1.35: 2.2.0+, 2.1.5+, 1.7.28+
#   1.36: 2.3.0+, 2.2.0+
# Below 1.6 there is no CRI v1 (the deprecated table: v1.4 is CRI v1alpha2 only).
CONTAINERD_FLOOR = {
    "1.30": {"1.6": (1, 6, 28), "1.7": (1, 7, 13), "2.0": (2, 0, 0), "2.1": (2, 1, 0)},
    "1.31": {"1.6": (1, 6, 34), "1.7": (1, 7, 20), "2.0": (2, 0, 0), "2.1": (2, 1, 0)},
    "1.32": {"1.6": (1, 6, 36), "1.7": (1, 7, 24), "2.0": (2, 0, 1), "2.1": (2, 1, 0)},
    "1.33": {"1.6": (1, 6, 36), "1.7": (1, 7, 24), "2.0": (2, 0, 4), "2.1": (2, 1, 0)},
    "1.34": {"1.6": (1, 6, 39), "1.7": (1, 7, 28), "2.0": (2, 0, 6), "2.1": (2, 1, 3)},
    "1.35": {"1.7": (1, 7, 28), "2.1": (2, 1, 5), "2.2": (2, 2, 0)},
    "1.36": {"2.2": (2, 2, 0), "2.3": (2, 3, 0)},
}
CONTAINERD_SOURCE = "https://github.com/containerd/containerd/blob/main/RELEASES.md#kubernetes-support"
# 2.3 is containerd's LTS line (to 2028-04-30; the 1.7 line, 1.7.34 here before, ended in
# September 2026), the newest patch with public checksums (kubespray, below; tag v2.3.4 of
# 2026-08-12). 1.35's row lists 2.2.0+, 2.1.5+ and 1.7.28+, all past their end of life now; a
# newer line than a row names is accepted (containerd_supported), and 2.3.0+ is 1.36's row.
# containerd 2.x reads config version 3, which core/bootstrap/containerd.py renders for it
# (version 2 for a 1.x the node keeps).
CONTAINERD_VERSION = "2.3.4"
CONTAINERD_RELEASES = "https://github.com/containerd/containerd/releases/download"

# The sha256 of each release file geotrain installs, by (release version, file name): a
# download or an air-gap bundle file is installed only when it matches (core.bootstrap.checksums).
# A value is pinned only where a public source other than the release itself gives it for
# exactly that version, cited beside it; a file without one needs the user's `--sha256
# NAME=HEX` (or --insecure-skip-checksum). Never the checksum list served beside the file.
RELEASE_SHA256 = {
    # kubespray roles/kubespray_defaults/vars/main/checksums.yml, containerd_archive_checksums
    # (commit 46dbdd399, "Patch versions updates (#13423)", 2026-08-21)
    ("2.3.4", "containerd-2.3.4-linux-amd64.tar.gz"):
        "9d68969855fbf676cdb8ed758e420fb048d61f984f61de3e53eddfebe484d168",
    ("2.3.4", "containerd-2.3.4-linux-arm64.tar.gz"):
        "a985fbb7e18fc0362d31a055338f5d7b0e087a3e27f14c70d1c5965399a29f95",
    # k3s v1.35.5+k3s1 (k3s, k3s-arm64, k3s-airgap-images-<arch>.tar): no public source
    # besides the release's own sha256sum-<arch>.txt was found: not pinned.
}

# NVIDIA: the release-0.19 branch's "Bump k8s-device-plugin version to v0.19.2"
# (NVIDIA/k8s-device-plugin#1814, merged 2026-05-26); v0.17.0 before. Its flags geotrain sets
# (PASS_DEVICE_SPECS) are unchanged since.
NVIDIA_PLUGIN_VERSION = "v0.19.2"
NVIDIA_PLUGIN_IMAGE = f"nvcr.io/nvidia/k8s-device-plugin:{NVIDIA_PLUGIN_VERSION}"
# AMD: the ROCm plugin's helm index (ROCm/k8s-device-plugin index.yaml) lists appVersion
# 1.31.0.7 (2025-06); the image is tagged the same. Never the moving `master` manifest.
AMD_PLUGIN_VERSION = "1.31.0.7"
AMD_PLUGIN_IMAGE = f"docker.io/rocm/k8s-device-plugin:{AMD_PLUGIN_VERSION}"



@dataclass(frozen=True)
class Support:
    """How long a pin is supported upstream: `until` is the published end of life, or, where
    `published` is False, the date by which the pin must be looked at again (upstream gives none)."""

    pin: str
    until: datetime.date
    published: bool
    source: str  # where `until` comes from, and when it was read


SUPPORT = {
    "k3s": Support(K3S_VERSION, datetime.date(2027, 2, 28), True,
                   "kubernetes.io/releases/1.35: End Of Life Date 2027-02-28 (read 2026-11-28); k3s "
                   "follows the Kubernetes minor's support"),
    "volcano": Support(VOLCANO_FOR_K8S["1.35"], datetime.date(2027, 2, 28), False,
                       "Volcano publishes no end of life; the pin is kept while its paired Kubernetes "
                       "minor (1.35) is supported (README compatibility table, read 2026-11-28)"),
    "containerd": Support(CONTAINERD_VERSION, datetime.date(2028, 4, 30), True,
                          "containerd RELEASES.md 'Current State of containerd Releases': 2.3 LTS, "
                          "End of Life April 30, 2028 (read 2026-11-28, commit 301026e58)"),
    "nvidia-device-plugin": Support(NVIDIA_PLUGIN_VERSION, datetime.date(2027, 5, 26), False,
                                    "NVIDIA publishes no end of life per release; look again a year "
                                    "after v0.19.2 (2026-05-26)"),
    "amd-device-plugin": Support(AMD_PLUGIN_VERSION, datetime.date(2026, 12, 31), False,
                                 "ROCm publishes no end of life; helm index appVersion 1.31.0.7 of "
                                 "2025-06 (read then): look again by the end of 2026"),
}
# Pins past their end of life that cannot move here, with what the move needs (the test
# fails for any other pin past its date, and for an entry here that is no longer past it).
PAST_END_OF_LIFE: dict[str, str] = {}

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
