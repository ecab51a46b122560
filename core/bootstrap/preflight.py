"""Preflight: can each node take part? Blockers for every node before anything changes.

The rules are core.nodes.blockers (the node pool judges the same ones); here they are
told what this deploy asks of the node: its role's ports, our WireGuard, the disk floor.
"""

from __future__ import annotations

from core.bootstrap.plan import FACTS_KEY, ClusterPlan, DeployContext, NodeTarget
from core.bootstrap.runner import Phase, Step
from core.bootstrap.session import StepFailed
from core.nodes import blockers as policy
from core.nodes import facts as node_facts
from core.nodes.facts import gpus


def context(plan: ClusterPlan, target: NodeTarget) -> policy.Context:
    """What this deploy asks of the node; a member already (it has recorded state) owns
    the k3s it runs."""
    return policy.Context(ours=bool(target.state),
                          ports=policy.needed_ports(target.spec.role, plan.vpn, plan.listen_port),
                          wg_port=plan.listen_port, wg_interface=plan.interface,
                          min_disk_gb=plan.min_disk_gb, k3s_version=plan.k3s.version)


def blockers(plan: ClusterPlan, target: NodeTarget, facts: dict) -> list[str]:
    """Everything that stops this node from joining, each with what to do."""
    return policy.blockers(facts, context(plan, target))


def _check(ctx: DeployContext, target: NodeTarget) -> str:
    facts = target.gather_facts()
    found = [] if ctx.dry_run else blockers(ctx.plan, target, facts)
    facts["blockers"] = found
    if found:
        raise StepFailed("; ".join(found))
    vendors = gpus.vendors(facts)
    kind = "NVIDIA GPUs" if "nvidia" in vendors else "AMD GPUs" if "amd" in vendors else "no GPUs"
    system = facts.get("system", {})
    return f"{system.get('os_id') or 'linux'} {system.get('os_version', '')}, {kind}, ready"


def _probe(ctx: DeployContext, target: NodeTarget) -> dict[str, str]:
    return {FACTS_KEY: node_facts.script(())}


STEP = Step("preflight", [Phase("checks", _check)], gate=True, probe=_probe)
