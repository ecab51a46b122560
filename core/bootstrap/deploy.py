"""Deploying a cluster: plan from the records, run the steps, record what came out.

The cluster record, membership (`cluster_nodes`: role, mesh IP, per-node state such as
the WireGuard public key and packages geotrain installed), node status IN_CLUSTER and
the network matrix are written through the state store; the k3s join token lives only
in the secret store. A dry run reads nothing, writes nothing and connects nowhere.
"""

from __future__ import annotations

import json
import secrets as random_secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from core.state import paths
from core.bootstrap import load_steps, versions
from core.bootstrap.plan import (ClusterPlan, DeployContext, K3sOptions, NodeSpec, NodeTarget,
                                 ProgressEvent, VolcanoOptions, assign_mesh_ips, parse_subnet)
from core.bootstrap.registry_mirrors import parse_mirrors
from core.bootstrap.runner import DeploySummary, Step, run_steps
from core.bootstrap.session import CommandLog, NodeSession, Shell
from core.state.cluster_records import delete_cluster as delete_record
from core.state.cluster_records import get_cluster, save_cluster
from core.schema.endpoints import check_host, check_interface, parse_host_port
from core.errors import InvalidInput, NotFound
from core.domain.datacenters import check_datacenter
from core.domain.records import NAME_RE, Cluster, Node
from core.state.node_records import get_node
from core.state.secret_store import SecretStore
from core.state.store import Store, loads

IN_CLUSTER = "IN_CLUSTER"
AVAILABLE = "AVAILABLE"
ShellFactory = Callable[[Node], Shell]


def token_ref(cluster: str) -> str:
    return f"cluster/{cluster}/k3s-token"


class PoolShells:
    """The production shells: the node pool's SSH connections (pinned host keys, one key
    ring); a changed key whose fingerprint was given (--trust-host-key) is re-pinned."""

    def __init__(self, store: Store, trusted: set[str] | frozenset = frozenset()) -> None:
        from core.nodes.pool import NodePool, Prompts

        self.pool = NodePool(store, Prompts(trusted=set(trusted)))

    def __call__(self, node: Node) -> Shell:
        return self.pool.connection(node)

    def save_pins(self) -> None:
        self.pool.known_hosts.save()


def pool_shells(store: Store, trusted: set[str] | frozenset = frozenset()) -> PoolShells:
    return PoolShells(store, trusted)


@dataclass
class DeployResult:
    summary: DeploySummary
    command_log: CommandLog
    targets: dict[str, NodeTarget] = field(default_factory=dict)


def _members(store: Store, cluster: str) -> dict[str, dict]:
    with store.read() as conn:
        rows = conn.execute("SELECT * FROM cluster_nodes WHERE cluster=? ORDER BY rowid",
                            (cluster,)).fetchall()
    return {r["node"]: {"role": r["role"], "mesh_ip": r["mesh_ip"],
                        "state": loads(r["state"], {})} for r in rows}


def _config_to_plan(name: str, config: dict, specs: list[NodeSpec]) -> ClusterPlan:
    plan = ClusterPlan(name=name, nodes=specs)
    for key in ("vpn", "subnet", "interface", "listen_port", "mtu", "prepull", "image"):
        if key in config:
            setattr(plan, key, config[key])
    plan.registry_mirrors = parse_mirrors(config.get("registry_mirrors") or {})
    check_interface(plan.interface)
    parse_subnet(plan.subnet)
    for key in ("listen_port", "mtu"):
        if not isinstance(getattr(plan, key), int) or isinstance(getattr(plan, key), bool):
            raise InvalidInput(f"cluster {name!r}: stored {key} {getattr(plan, key)!r} is not a number",
                               "delete the cluster and deploy it again")
    plan.k3s = K3sOptions(**config.get("k3s", {}))
    plan.volcano = VolcanoOptions(**config.get("volcano", {}))
    # a record from before the pairing (e.g. Volcano v1.10 on k3s 1.31) gets the paired release
    plan.volcano.version = versions.volcano_for(plan.k3s.version)
    return plan


def node_log_path(cluster: str, node: str) -> Path:
    """The per-node log of a cluster deploy (the app opens it with `l`)."""
    return paths.home() / "logs" / "clusters" / cluster / f"{node}.log"


def plan_config(plan: ClusterPlan) -> dict:
    return {"vpn": plan.vpn, "subnet": plan.subnet, "interface": plan.interface,
            "listen_port": plan.listen_port, "mtu": plan.mtu,
            "endpoints": {n.name: n.endpoint for n in plan.nodes if n.endpoint},
            "k3s": asdict(plan.k3s), "volcano": asdict(plan.volcano),
            **({"prepull": True} if plan.prepull else {}), **({"image": plan.image} if plan.image else {}),
            **({"registry_mirrors": dict(plan.registry_mirrors)} if plan.registry_mirrors else {})}


def build_plan(store: Store, name: str, node_names: list[str], vpn: bool | None = None,
               subnet: str | None = None, endpoints: dict[str, str] | None = None) -> ClusterPlan:
    """The plan for `name`: existing members (kept in order) plus `node_names`."""
    if not NAME_RE.fullmatch(name):
        raise InvalidInput(f"cluster name {name!r} is not valid",
                           "use 1-32 lowercase letters, digits and '-', starting and ending with a letter or digit")
    try:
        existing = get_cluster(store, name)
    except NotFound:
        existing = None
    if existing and existing.kind != "geotrain":
        raise InvalidInput(f"cluster {name!r} is a {existing.kind} cluster, not one geotrain built",
                           "choose another name for the new cluster")
    config = existing.config if existing else {}
    if existing and subnet and subnet != config.get("subnet"):
        raise InvalidInput(f"cluster {name!r} already uses subnet {config.get('subnet')}",
                           "drop --subnet, or delete the cluster and deploy it again")
    repeated = sorted({n for n in node_names if node_names.count(n) > 1})
    if repeated:
        raise InvalidInput(f"node {repeated[0]!r} is listed twice in --nodes",
                           "name each node once")
    members = _members(store, name)
    order = list(members) + [n for n in node_names if n not in members]
    strays = sorted(set(endpoints or {}) - set(order))
    if strays:
        raise InvalidInput(f"--endpoint names {strays[0]!r}, which is not one of the nodes",
                           f"the nodes are {', '.join(order) or 'none'}")
    if not order:
        raise InvalidInput("no nodes given", "pass --nodes a,b,c (names from `geotrain nodes list`)")
    endpoints = {**config.get("endpoints", {}), **(endpoints or {})}
    specs = []
    for index, node_name in enumerate(order):
        node = get_node(store, node_name)
        if node.cluster and node.cluster != name:
            raise InvalidInput(f"node {node_name!r} already belongs to cluster {node.cluster!r}",
                               f"remove it there first: geotrain clusters remove-node "
                               f"{node.cluster} {node_name}")
        member = members.get(node_name, {})
        _check_node(node_name, node.host, endpoints.get(node_name))
        if node.datacenter:
            check_datacenter(node.datacenter, f"node {node_name}")
        specs.append(NodeSpec(name=node_name, host=node.host,
                              role="server" if index == 0 else "agent",
                              mesh_ip=member.get("mesh_ip"), endpoint=endpoints.get(node_name),
                              datacenter=node.datacenter or None))
    plan = _config_to_plan(name, config, specs)
    if vpn is not None:
        plan.vpn = vpn
    if subnet:
        plan.subnet = str(parse_subnet(subnet))
    if plan.vpn:
        assign_mesh_ips(plan.subnet, plan.nodes)
    return plan


def _check_node(name: str, host: str, endpoint: str | None) -> None:
    """A node's name, host and endpoint reach remote shells and configs: checked in full."""
    if not NAME_RE.fullmatch(name):
        raise InvalidInput(f"node name {name!r} is not valid",
                           "rename it: 1-32 lowercase letters, digits and '-'")
    check_host(host, f"host of node {name}")
    if endpoint:
        parse_host_port(endpoint, 51820, f"endpoint of node {name}")


def _targets(store: Store, plan: ClusterPlan, factory: ShellFactory | None, dry_run: bool,
             log: CommandLog, secret_values: list[str]) -> dict[str, NodeTarget]:
    members = _members(store, plan.name)
    if not dry_run:
        node_log_path(plan.name, "-").parent.mkdir(parents=True, exist_ok=True)
    targets = {}
    factory = None if dry_run else (factory or pool_shells(store))
    for spec in plan.nodes:
        node = get_node(store, spec.name)
        shell = None if dry_run else factory(node)
        session = NodeSession(spec.name, shell, None if dry_run else node_log_path(plan.name, spec.name),
                              log, secret_values, dry_run=dry_run, sudo=node.username != "root")
        # what the pool saw: Volcano's device plugins need every node's GPUs, even where this
        # deploy gathers no facts (e.g. --only volcano), a dry run its architecture; k3s falls
        # back to the public IP the pool saw
        seeds = {k: node.facts[k] for k in ("gpus", "amd_kfd", "system") if k in node.facts}
        seeds["pool_public_ip"] = node.facts.get("public_ip")
        targets[spec.name] = NodeTarget(spec, session, facts=seeds,
                                        state=members.get(spec.name, {}).get("state", {}))
    return targets


def _record_start(store: Store, plan: ClusterPlan) -> Cluster | None:
    """Mark the cluster DEPLOYING; returns the record as it was (None if it is new)."""
    try:
        before = get_cluster(store, plan.name)
    except NotFound:
        before = None
    cluster = Cluster(name=plan.name, kind="geotrain", status="DEPLOYING",
                      config=plan_config(plan),
                      kubeconfig_path=before.kubeconfig_path if before else None)
    save_cluster(store, cluster)
    return before


def _record_blocked(store: Store, before: Cluster | None, name: str) -> None:
    """Preflight found blockers, so nothing changed: leave the records as they were."""
    if before is None:
        delete_record(store, name)
        SecretStore().delete_prefix(f"cluster/{name}/")
    else:
        save_cluster(store, before)


def _record_end(store: Store, plan: ClusterPlan, ctx: DeployContext,
                summary: DeploySummary) -> None:
    failed = {f.node for f in summary.failures}
    now = time.time()
    with store.write() as conn:
        for spec in plan.nodes:
            state = ctx.targets[spec.name].state
            state["steps_done"] = sorted(set(state.get("steps_done", [])) |
                                         set(summary.done.get(spec.name, [])))
            conn.execute(
                "INSERT INTO cluster_nodes(cluster, node, role, mesh_ip, state) VALUES (?,?,?,?,?)"
                " ON CONFLICT(cluster, node) DO UPDATE SET role=excluded.role,"
                " mesh_ip=excluded.mesh_ip, state=excluded.state",
                (plan.name, spec.name, spec.role, spec.mesh_ip, json.dumps(state)))
            conn.execute("UPDATE nodes SET cluster=?, status=?, updated_at=? WHERE name=?",
                         (plan.name, IN_CLUSTER, now, spec.name))
        for src, dst, latency, mbit in ctx.shared.get("netmatrix", []):
            conn.execute(
                "INSERT INTO net_matrix(cluster, src, dst, latency_ms, mbit_s, measured_at)"
                " VALUES (?,?,?,?,?,?) ON CONFLICT(cluster, src, dst) DO UPDATE SET"
                " latency_ms=excluded.latency_ms, mbit_s=excluded.mbit_s,"
                " measured_at=excluded.measured_at", (plan.name, src, dst, latency, mbit, now))
        status = "READY" if not failed else "DEGRADED"
        kubeconfig = ctx.shared.get("kubeconfig_path")
        conn.execute("UPDATE clusters SET status=?, updated_at=?,"
                     " kubeconfig_path=COALESCE(?, kubeconfig_path) WHERE name=?",
                     (status, now, kubeconfig, plan.name))


def measured_pairs(store: Store, cluster: str) -> set[tuple[str, str]]:
    with store.read() as conn:
        rows = conn.execute("SELECT src, dst FROM net_matrix WHERE cluster=?", (cluster,))
        return {(r["src"], r["dst"]) for r in rows}


def deploy(plan: ClusterPlan, only: list[str] | None = None, dry_run: bool = False,
           shell_factory: ShellFactory | None = None, store: Store | None = None,
           on_event: Callable[[ProgressEvent], None] | None = None,
           steps: list[Step] | None = None, record: bool = True,
           trust_host_keys: set[str] | None = None,
           planned: list[str] | None = None) -> DeployResult:
    """Run the steps (all, or `only`; or the given `steps`) on every node of `plan`.

    With `record`, the outcome goes to the state store (teardown records its own).
    `planned`: the steps a later run will take, when this one (`only=["preflight"]`, the
    wizard's preflight) checks ahead of it; preflight judges by them, as that run's will.
    """
    store = store or Store()
    steps = steps if steps is not None else load_steps(only, plan.vpn, plan.prepull)
    record = record and not dry_run
    vault = SecretStore()
    token = vault.get(token_ref(plan.name))
    if token is None:
        token = random_secrets.token_hex(32)
        if record:
            vault.put(token_ref(plan.name), token)
    log = CommandLog()
    secret_values = [token]
    if shell_factory is None and not dry_run:
        shell_factory = pool_shells(store, trust_host_keys or frozenset())
    targets = _targets(store, plan, shell_factory, dry_run, log, secret_values)
    ctx = DeployContext(plan, targets, log, secrets={"k3s-token": token}, dry_run=dry_run,
                        on_event=on_event)
    # preflight judges containerd and the release files by them
    ctx.shared["steps"] = list(planned) if planned else [step.name for step in steps]
    ctx.shared["measured"] = measured_pairs(store, plan.name)
    ctx.shared["remeasure"] = only == ["netmatrix"]
    before = _record_start(store, plan) if record else None
    try:
        summary = run_steps(ctx, steps)
    finally:
        for target in targets.values():
            target.session.close()
            close = getattr(target.session.shell, "close", None)
            if close:
                close()
        save_pins = getattr(shell_factory, "save_pins", None)
        if save_pins:
            save_pins()
    if record and summary.blocked:
        _record_blocked(store, before, plan.name)
    elif record:
        _record_end(store, plan, ctx, summary)
    return DeployResult(summary, log, targets)
