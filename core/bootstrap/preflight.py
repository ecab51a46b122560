"""Preflight: can each node take part? Blockers for every node before anything changes.

The rules are core.nodes.blockers (the node pool judges the same ones); here they are
told what this deploy asks of the node: its role's ports, our WireGuard, the disk floor.
"""

from __future__ import annotations

from pathlib import Path

from core.bootstrap import checksums, containerd, offline, versions, volcano
from core.bootstrap.plan import FACTS_KEY, ClusterPlan, DeployContext, NodeTarget
from core.bootstrap.runner import Phase, Step
from core.bootstrap.session import StepFailed
from core.domain.architectures import node_arch
from core.nodes import blockers as policy
from core.nodes import facts as node_facts
from core.nodes.facts import gpus


def context(plan: ClusterPlan, target: NodeTarget) -> policy.Context:
    """What this deploy asks of the node; a member already (it has recorded state) owns
    the k3s it runs."""
    return policy.Context(ours=bool(target.state),
                          ports=policy.needed_ports(target.spec.role, plan.vpn, plan.listen_port),
                          wg_port=plan.listen_port, wg_interface=plan.interface,
                          min_disk_gb=plan.min_disk_gb, k3s_version=plan.k3s.version,
                          default_images=not plan.image)


def containerd_blockers(plan: ClusterPlan, facts: dict, steps: list[str]) -> list[str]:
    """Kubernetes needs a containerd its minor supports (containerd's RELEASES.md table).

    Below the floor is fine when this run's containerd step installs the pinned release.
    """
    if "k3s" not in steps or "containerd" in steps:
        return []
    if containerd.verdict(facts, plan.k3s.version) == "ok":
        return []
    have = containerd.installed_version(facts) or "missing"
    return [f"containerd {have} is not one Kubernetes {versions.k8s_minor(plan.k3s.version)} "
            f"supports ({versions.containerd_floor_text(plan.k3s.version)}): include the "
            f"containerd step so geotrain installs {versions.CONTAINERD_VERSION}, or upgrade it "
            "yourself"]


def checksum_blockers(plan: ClusterPlan, facts: dict, steps: list[str]) -> list[str]:
    """A release file this run would install with no known sha256, or a bundle file that
    does not match it (core.bootstrap.checksums): refused before anything changes."""
    try:
        arch = versions.release_arch(facts.get("system", {}).get("arch"))
    except versions.UnsupportedArch:
        return []  # the pool's rules already block the node
    names = []
    if "containerd" in steps and containerd.verdict(facts, plan.k3s.version) == "install":
        names.append(versions.containerd_tarball(arch))
    if "k3s" in steps and (facts.get("k3s") or {}).get("version") != plan.k3s.version:
        names.append(versions.k3s_asset(arch))
        if plan.k3s.bundle and (Path(plan.k3s.bundle) / versions.airgap_images(arch)).is_file():
            names.append(versions.airgap_images(arch))  # absent: the nodes pull the images
    return checksums.problems(plan, arch, names)


def blockers(plan: ClusterPlan, target: NodeTarget, facts: dict,
             steps: list[str] | None = None) -> list[str]:
    """Everything that stops this node from joining, each with what to do: the pool's rules,
    the containerd this run's k3s needs, and the release files it may install."""
    return (policy.blockers(facts, context(plan, target))
            + containerd_blockers(plan, facts, list(steps or []))
            + checksum_blockers(plan, facts, list(steps or [])))


def _check(ctx: DeployContext, target: NodeTarget) -> str:
    facts = target.gather_facts()
    steps = ctx.shared.get("steps", [])
    found = [] if ctx.dry_run else blockers(ctx.plan, target, facts, steps)
    facts["blockers"] = found
    if found:
        raise StepFailed("; ".join(found))
    vendors = gpus.vendors(facts)
    kind = "NVIDIA GPUs" if "nvidia" in vendors else "AMD GPUs" if "amd" in vendors else "no GPUs"
    system = facts.get("system", {})
    said = (f"{system.get('os_id') or 'linux'} {system.get('os_version', '')}, {kind}, "
            f"{_containerd_note(ctx, facts, steps)}ready{_plugin_note(vendors, facts)}")
    return f"{said}; {offline.needs_line(ctx.plan, facts)}" if ctx.plan.k3s.bundle else said


def _plugin_note(vendors: set[str], facts: dict) -> str:
    """Where the GPU vendor's device plugin has no image for the node's CPU (ROCm's is amd64 only:
    volcano.PLUGIN_ARCHES), its GPUs are never advertised: said at preflight, not found later."""
    vendor, arch = ("nvidia" if "nvidia" in vendors else "amd" if vendors else None), node_arch(facts)
    if vendor is None or arch in volcano.PLUGIN_ARCHES[vendor]:
        return ""
    return (f" (warning: the {vendor.upper()} device plugin has no {arch} image, so this node's GPUs will "
            "not be advertised and workspaces run no GPU work on it)")


def _containerd_note(ctx: DeployContext, facts: dict, steps: list[str]) -> str:
    have = containerd.installed_version(facts)
    if "containerd" not in steps or containerd.verdict(facts, ctx.plan.k3s.version) == "ok":
        return f"containerd {have}, " if have else ""
    if "k3s" in steps or not have:
        return f"containerd {have or 'missing'} -> {versions.CONTAINERD_VERSION}, "
    return f"containerd {have} (below Kubernetes' floor: the k3s run upgrades it), "


def _probe(ctx: DeployContext, target: NodeTarget) -> dict[str, str]:
    return {FACTS_KEY: node_facts.script(())}


STEP = Step("preflight", [Phase("checks", _check)], gate=True, probe=_probe)
