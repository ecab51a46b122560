"""CPU architectures, as container images and Kubernetes name them (`kubernetes.io/arch`,
an image index's `platform.architecture`: amd64, arm64), from what a node reports."""

from __future__ import annotations

# `uname -m` -> the release architecture of k3s, containerd and images
RELEASE_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
ARCH_LABEL = "kubernetes.io/arch"  # set by the kubelet on every node (k8s well-known labels)
DEFAULT_ARCH = "amd64"  # what a node recorded before architectures were tracked ran


def node_arch(facts: dict) -> str:
    """A node's image architecture from its pool facts (system.arch is `uname -m`); a node with no
    recorded architecture (facts from before, a dry run) counts as amd64, as its images did."""
    machine = str((facts.get("system") or {}).get("arch") or "")
    return RELEASE_ARCH.get(machine, machine or DEFAULT_ARCH)
