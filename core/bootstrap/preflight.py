"""Preflight: can each node take part? Blockers for every node before anything changes."""

from __future__ import annotations

from core.bootstrap import host_facts
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


def blockers(plan: ClusterPlan, target: NodeTarget, facts: dict) -> list[str]:
    """Everything that stops this node from joining, each with what to do."""
    found = []
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
    found = [] if ctx.dry_run else blockers(ctx.plan, target, facts)
    facts["blockers"] = found
    if found:
        raise StepFailed("; ".join(found))
    gpus = "NVIDIA GPUs" if facts.get("nvidia_gpus") else "AMD GPUs" if facts.get("amd_gpus") else "no GPUs"
    return f"{facts.get('os_id') or 'linux'} {facts.get('os_version', '')}, {gpus}, ready"


def _links_command(ctx: DeployContext) -> str:
    return f"ip -o link show dev {ctx.plan.interface}"


def _probe(ctx: DeployContext, target: NodeTarget) -> dict[str, str]:
    return {**host_facts.probe(ctx, target), "links": _links_command(ctx)}


STEP = Step("preflight", [Phase("checks", _check)], gate=True, probe=_probe)
