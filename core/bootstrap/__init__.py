"""The cluster wizard: steps that turn pool nodes into one k3s cluster over a WireGuard mesh.

Each step reads facts on a node and issues commands only for what differs, so a re-run
of a finished cluster changes nothing and a re-run after a failure resumes.

Imports core.nodes (SSH, facts), core.state, core.domain, core.schema, core.errors.
"""

from __future__ import annotations

from core.errors import InvalidInput

STEP_NAMES = ("preflight", "containerd", "wireguard", "netmatrix", "k3s", "volcano",
              "images", "kubeconfig")
OPTIONAL_STEPS = ("images",)  # run when asked (--pull-images, the wizard's checkbox, --only)


def default_steps(vpn: bool = True, prepull: bool = False) -> list[str]:
    """The names a full deploy runs, in order."""
    return [s for s in STEP_NAMES if (vpn or s != "wireguard") and (prepull or s not in OPTIONAL_STEPS)]


def load_steps(only: list[str] | None = None, vpn: bool = True, prepull: bool = False) -> list:
    """The steps to run, in order; `only` picks a subset (names as in STEP_NAMES)."""
    from core.bootstrap import (containerd, image_pull, k3s, kubeconfig, netmatrix, preflight,
                                volcano, wireguard_mesh)

    modules = {"preflight": preflight, "containerd": containerd, "wireguard": wireguard_mesh,
               "netmatrix": netmatrix, "k3s": k3s, "volcano": volcano, "images": image_pull,
               "kubeconfig": kubeconfig}
    unknown = [s for s in only or () if s not in STEP_NAMES]
    if unknown:
        raise InvalidInput(f"unknown step {unknown[0]!r} in --only",
                           f"choose from {','.join(STEP_NAMES)}")
    if only and "wireguard" in only and not vpn:
        raise InvalidInput("--only wireguard contradicts --no-vpn", "drop one of them")
    names = [s for s in STEP_NAMES if (s in only) and (vpn or s != "wireguard")] if only \
        else default_steps(vpn, prepull)
    return [modules[name].STEP for name in names]
