"""Undoing what geotrain installed: a node leaving a cluster, or a whole cluster.

k3s goes (service, binary, data), the mesh interface and key pair go, containerd stops
and the owner's own config comes back; packages geotrain installed are removed unless
`keep_packages`; geotrain's node data goes (NODE_DATA: the dataset cache, the recipes'
Python packages, checkpoints kept in node directories, downloads). Best effort per node:
every node is tried, failures are summed up. (A deleted workspace's own node directory:
core.nodes.node_dirs.)
"""

from __future__ import annotations

import shlex
from typing import Callable

from core.bootstrap import k3s
from core.bootstrap.containerd import BACKUP_PATH, CONFIG_PATH, PREFIX, SOCKET, UNIT_PATH
from core.bootstrap.deploy import AVAILABLE, DeployResult, ShellFactory, build_plan, deploy
from core.bootstrap.kubeconfig import cluster_kubeconfig_path
from core.bootstrap.packages import APT
from core.bootstrap.plan import ClusterPlan, DeployContext, NodeTarget, ProgressEvent
from core.bootstrap.runner import DeploySummary, Phase, Step
from core.bootstrap.session import CommandLog
from core.bootstrap.services import RUN_DIR
from core.bootstrap.wireguard_boot import config_path
from core.bootstrap.wireguard_mesh import KEY_PATH
from core.state.cluster_records import delete_cluster as delete_record
from core.state.cluster_records import get_cluster
from core.errors import InvalidInput
from core.state.secret_store import SecretStore
from core.state.store import Store

q = shlex.quote  # every name and path below reaches the node's root shell
NODE_DATA = "/var/lib/geotrain"  # the default home of every node directory geotrain's pods use


def undo_commands(plan: ClusterPlan, target: NodeTarget, keep_packages: bool) -> list[tuple]:
    """The commands that remove geotrain's parts from one node, in order."""
    opts = plan.k3s
    systemd = target.facts.get("init", {}).get("systemd")
    stop_k3s = ("systemctl disable --now k3s k3s-agent 2>/dev/null;"
                " rm -f /etc/systemd/system/k3s.service /etc/systemd/system/k3s-agent.service;"
                " systemctl daemon-reload" if systemd else
                " ".join(f"pid=$(cat {RUN_DIR}/{n}.pid 2>/dev/null) && kill $pid;"
                         for n in ("k3s", "k3s-agent")) + " true")
    cmds = [
        (stop_k3s, "stopping k3s"),
        (f"rm -rf {shlex.quote(opts.config_dir)} /var/lib/rancher/k3s"
         f" {shlex.quote(opts.bin_dir + '/k3s')};"
         " ip link del flannel.1 2>/dev/null; ip link del cni0 2>/dev/null; true",
         "removing k3s and its network devices"),
        (f"if [ -S {SOCKET} ]; then c='ctr --address {SOCKET} -n k8s.io';"
         " for t in $($c tasks ls -q); do $c tasks kill -s KILL $t; done; sleep 1;"
         " for t in $($c tasks ls -q); do $c tasks rm -f $t; done;"
         " $c containers ls -q | xargs -r $c containers rm; fi; true",
         "removing the pods' containers"),
        ((f"systemctl disable {q('wg-quick@' + plan.interface)} 2>/dev/null; " if systemd else "") +
         f"ip link del dev {q(plan.interface)} 2>/dev/null;"
         f" rm -f {KEY_PATH} {q(config_path(plan.interface))}; true",
         "removing the mesh interface, its boot config and key pair"),
        ("systemctl disable --now containerd" if systemd else
         f"pid=$(cat {RUN_DIR}/containerd.pid 2>/dev/null) && kill $pid; true",
         "stopping containerd"),
        (f"if [ -f {BACKUP_PATH} ]; then mv {BACKUP_PATH} {CONFIG_PATH};"
         f" else rm -f {CONFIG_PATH}; fi", "restoring the containerd config"),
    ]
    if target.state.get("containerd_release") and not keep_packages:
        cmds.append((release_removal(systemd), "removing the containerd release geotrain put in"))
    if systemd:
        cmds.append((f"[ -f {CONFIG_PATH} ] && systemctl enable --now containerd; true",
                     "restarting the owner's containerd"))
    packages = target.state.get("installed_packages", [])
    if packages and not keep_packages:
        cmds.append((f"{APT} remove -y -q {' '.join(map(q, packages))}", "removing packages"))
    cmds.append((node_data_removal(), f"removing geotrain's node data ({NODE_DATA}; file systems "
                                      "mounted below it stay)"))
    cmds.append((f"rm -rf {RUN_DIR}", "removing geotrain's run files"))
    return cmds


def node_data_removal() -> str:
    """--one-file-system: a share mounted below NODE_DATA (NFS datasets) is not emptied for every
    cluster that uses it; such a mount point, and NODE_DATA itself if it is one, stays (kept_text)."""
    return f"rm -rf --one-file-system {NODE_DATA}; true"


def kept_text(config: dict) -> str:
    """What a cluster's delete removes from its nodes' disks and what it leaves there."""
    cache = config.get("dataset_cache")
    kept = [f"the cluster's dataset_cache {cache}"] if isinstance(cache, str) and not \
        (cache + "/").startswith(NODE_DATA + "/") else []
    kept.append("workspaces' recovery.host_path directories and claims")
    kept.append(f"file systems mounted below {NODE_DATA} (a shared dataset mount, say), as they are")
    return (f"On every node this removes k3s and its data (/var/lib/rancher/k3s), the mesh and "
            f"geotrain's containerd setup, and {NODE_DATA} (dataset cache, the recipes' Python "
            f"packages, checkpoints kept in node directories, downloads). Kept: {'; '.join(kept)}.")


def release_removal(systemd: bool) -> str:
    """The static containerd release's binaries (and its unit) under /usr/local."""
    names = ("containerd", "containerd-shim", "containerd-shim-runc-v1", "containerd-shim-runc-v2",
             "containerd-stress", "ctr")
    files = " ".join(f"{PREFIX}/bin/{n}" for n in names)
    return f"rm -f {files}" + (f" {UNIT_PATH}; systemctl daemon-reload" if systemd else "")


def _undo(keep_packages: bool) -> Callable[[DeployContext, NodeTarget], str]:
    def run(ctx: DeployContext, target: NodeTarget) -> str:
        target.gather_facts()
        target.session.change_all(undo_commands(ctx.plan, target, keep_packages), timeout=600)
        return "geotrain's parts removed"
    return run


def _server_forgets(name: str) -> Callable[[DeployContext, NodeTarget], str | None]:
    def run(ctx: DeployContext, target: NodeTarget) -> str | None:
        kubectl = k3s.kubectl(ctx.plan)
        if target.session.fact(f"{kubectl} get node {q(name)} >/dev/null 2>&1").ok:
            target.session.change(f"{kubectl} delete node {q(name)} --wait=false",
                                  what=f"deleting node {name} from Kubernetes")
            return f"node {name} deleted from Kubernetes"
        return None
    return run


def _on(names: set[str]):
    return lambda ctx, alive: [t for t in alive if t.name in names]


def _forget_members(store: Store, cluster: str, nodes: list[str]) -> None:
    with store.write() as conn:
        for node in nodes:
            conn.execute("DELETE FROM cluster_nodes WHERE cluster=? AND node=?", (cluster, node))
            conn.execute("DELETE FROM net_matrix WHERE cluster=? AND (src=? OR dst=?)",
                         (cluster, node, node))
            conn.execute("UPDATE nodes SET cluster=NULL, status=? WHERE name=?", (AVAILABLE, node))


def remove_node(cluster: str, node: str, keep_packages: bool = False,
                shell_factory: ShellFactory | None = None, store: Store | None = None,
                on_event: Callable[[ProgressEvent], None] | None = None) -> DeployResult:
    """Take `node` out of `cluster`: undo it there, drop its peer and Kubernetes node."""
    store = store or Store()
    record = get_cluster(store, cluster)
    if node not in record.nodes:
        raise InvalidInput(f"node {node!r} is not in cluster {cluster!r}",
                           f"its nodes: {', '.join(record.nodes) or 'none'}")
    plan = build_plan(store, cluster, [])
    if plan.server.name == node and len(plan.nodes) > 1:
        raise InvalidInput(f"{node} runs the cluster's k3s server and cannot leave alone",
                           f"delete the whole cluster: geotrain clusters delete {cluster}")
    server = plan.server.name
    steps = [Step("remove", [Phase("undo", _undo(keep_packages), _on({node})),
                             Phase("forget", _server_forgets(node), _on({server} - {node}))])]
    result = deploy(plan, steps=steps, shell_factory=shell_factory, store=store,
                    on_event=on_event, record=False)
    if any(f.node == node for f in result.summary.failures):
        return result  # keep the membership: re-running the removal retries it
    _forget_members(store, cluster, [node])
    rest = [n.name for n in plan.nodes if n.name != node]
    if rest and plan.vpn:
        after = build_plan(store, cluster, [])
        peers = deploy(after, only=["wireguard"], shell_factory=shell_factory, store=store,
                       on_event=on_event)
        result.summary.failures += peers.summary.failures
    return result


def delete_cluster(cluster: str, keep_packages: bool = False,
                   shell_factory: ShellFactory | None = None, store: Store | None = None,
                   on_event: Callable[[ProgressEvent], None] | None = None) -> DeployResult:
    """Undo geotrain's parts on every node, then forget the cluster and its secrets."""
    store = store or Store()
    record = get_cluster(store, cluster)
    if record.kind != "geotrain":
        raise InvalidInput(f"cluster {cluster!r} is a {record.kind} cluster: geotrain did not "
                           "build it and will not tear it down", "")
    if not record.nodes:
        delete_record(store, cluster)
        return DeployResult(DeploySummary([]), CommandLog())
    plan = build_plan(store, cluster, [])
    steps = [Step("delete", [Phase("undo", _undo(keep_packages))])]
    result = deploy(plan, steps=steps, shell_factory=shell_factory, store=store,
                    on_event=on_event, record=False)
    if result.summary.failures:
        return result
    _forget_members(store, cluster, [n.name for n in plan.nodes])
    delete_record(store, cluster)
    SecretStore().delete_prefix(f"cluster/{cluster}/")
    cluster_kubeconfig_path(cluster).unlink(missing_ok=True)
    return result
