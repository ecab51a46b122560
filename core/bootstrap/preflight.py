"""Preflight: can each node take part? Blockers for every node before anything changes."""

from __future__ import annotations

from core.bootstrap import containerd, host_facts, versions
from core.bootstrap.plan import ClusterPlan, DeployContext, NodeTarget
from core.bootstrap.runner import Phase, Step
from core.bootstrap.session import StepFailed

# Daemons that may already hold our ports on a node geotrain has set up before.
OWN_PROCESSES = {"wireguard-go", "k3s", "k3s-server", "k3s-agent", "containerd"}


def needed_ports(plan: ClusterPlan, role: str) -> list[tuple[str, int, str]]:
    ports = [("tcp", 10250, "kubelet"), ("udp", 8472, "flannel VXLAN")]
    if role == "server":
        ports.append(("tcp", 6443, "Kubernetes API"))
    if plan.vpn:
        ports.append(("udp", plan.listen_port, "WireGuard"))
    return ports


def containerd_blockers(plan: ClusterPlan, facts: dict, steps: list[str]) -> list[str]:
    """Kubernetes needs a containerd its minor supports (containerd's RELEASES.md table).

    Below the floor is fine when this run's containerd step installs the pinned release.
    """
    if "k3s" not in steps or "containerd" in steps:
        return []
    if containerd.verdict(facts, plan.k3s.version) == "ok":
        return []
    have = facts.get("containerd_version") or "missing"
    return [f"containerd {have} is not one Kubernetes {versions.k8s_minor(plan.k3s.version)} "
            f"supports ({versions.containerd_floor_text(plan.k3s.version)}): include the "
            f"containerd step so geotrain installs {versions.CONTAINERD_VERSION}, or upgrade it "
            "yourself"]


def arch_blockers(facts: dict, steps: list[str]) -> list[str]:
    if not {"k3s", "containerd"} & set(steps):
        return []
    try:
        versions.release_arch(facts.get("arch"))
    except versions.UnsupportedArch as exc:
        return [f"{exc}: use an amd64 or arm64 server"]
    return []


def blockers(plan: ClusterPlan, target: NodeTarget, facts: dict,
             steps: list[str] | None = None) -> list[str]:
    """Everything that stops this node from joining, each with what to do."""
    steps = list(steps or [])
    found = containerd_blockers(plan, facts, steps) + arch_blockers(facts, steps)
    if facts.get("kernel") != "Linux":
        found.append(f"not Linux ({facts.get('kernel') or 'unknown'}): use a Linux server")
    if facts.get("uid") != 0 and not facts.get("sudo_ok"):
        found.append("no root and no password-less sudo: allow `sudo -n` for this user")
    if facts.get("docker"):
        found.append("a Docker engine runs here: stop and remove Docker, or pick another node")
    free_gb = (facts.get("disk_kb") or 0) / 1024 / 1024
    if free_gb < plan.min_disk_gb:
        found.append(f"only {free_gb:.1f} GB free under /var/lib (need {plan.min_disk_gb:g}): "
                     "free some space")
    own_wg = plan.interface in facts.get("links", "")
    for proto, port, what in needed_ports(plan, target.spec.role):
        for have_proto, have_port, process in facts.get("listen", []):
            if have_proto != proto or have_port != port or process in OWN_PROCESSES:
                continue
            if not process and (port != plan.listen_port or own_wg):
                continue  # a kernel socket: our WireGuard interface, or flannel's VXLAN
            found.append(f"{proto} port {port} ({what}) is taken by {process or 'the kernel'}: "
                         "free it or pick another node")
    return found


def _check(ctx: DeployContext, target: NodeTarget) -> str:
    facts = host_facts.gather(target)
    if facts.get("uid") != 0:
        facts["sudo_ok"] = target.session.fact("sudo -n true", sudo=False).ok
    facts["links"] = target.fact("links", _links_command(ctx)).stdout
    steps = ctx.shared.get("steps", [])
    found = [] if ctx.dry_run else blockers(ctx.plan, target, facts, steps)
    facts["blockers"] = found
    if found:
        raise StepFailed("; ".join(found))
    gpus = "NVIDIA GPUs" if facts.get("nvidia_gpus") else "AMD GPUs" if facts.get("amd_gpus") else "no GPUs"
    return (f"{facts.get('os_id') or 'linux'} {facts.get('os_version', '')}, {gpus}, "
            f"{_containerd_note(ctx, facts, steps)}ready")


def _containerd_note(ctx: DeployContext, facts: dict, steps: list[str]) -> str:
    have = facts.get("containerd_version")
    if "containerd" not in steps or containerd.verdict(facts, ctx.plan.k3s.version) == "ok":
        return f"containerd {have}, " if have else ""
    if "k3s" in steps or not have:
        return f"containerd {have or 'missing'} -> {versions.CONTAINERD_VERSION}, "
    return f"containerd {have} (below Kubernetes' floor: the k3s run upgrades it), "


def _links_command(ctx: DeployContext) -> str:
    return f"ip -o link show dev {ctx.plan.interface}"


def _probe(ctx: DeployContext, target: NodeTarget) -> dict[str, str]:
    return {**host_facts.probe(ctx, target), "links": _links_command(ctx)}


STEP = Step("preflight", [Phase("checks", _check)], gate=True, probe=_probe)
