"""The NetworkPolicy that fences a workspace's pods, and whether a cluster's network plugin
enforces NetworkPolicy at all.

torch's TCPStore answers anyone who connects and torchrun's c10d rendezvous unpickles what
it reads there, so a workspace's pods admit traffic only from:
- the job's own pods, on every port (NCCL and gloo pick their ports at run time);
- its watcher (pods labelled WATCHER_LABEL=<workspace>), on the rendezvous and store ports.
Every other pod, in this namespace or another, is refused on every port. Upstream semantics
(https://kubernetes.io/docs/concepts/services-networking/network-policies/, k8s.io/api
networking/v1 types.go): a pod selected by a policy with policyTypes [Ingress] is isolated
for ingress; a peer podSelector without namespaceSelector matches pods in the policy's own
namespace only; traffic from the pod's own node (kubelet) is always allowed. Pod IPs stay
pod IPs across datacenters (flannel's VXLAN over the WireGuard mesh), so the same rules
hold between datacenters.

A policy is only words unless the network plugin enforces it: k3s does, with its embedded
kube-router controller, unless started with --disable-network-policy; Calico, Cilium and
the like do; flannel alone does not. network_policy_support() reads that from the nodes and
the plugins' DaemonSets at registration.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

ELASTIC_STORE_PORT = 29401  # the watcher's elastic quorum store (recipes.elastic_store) in the cluster
WATCHER_LABEL = "geotrain.io/watcher-of"  # on the workspace's watcher pod: the workspace's label value
NETWORK_POLICY_KEY = "network_policy"  # cluster config: "enforced", "unknown" or "not enforced"
K3S_ARGS = "k3s.io/node-args"  # a JSON list of the server's or agent's arguments, config file included

# Names in the DaemonSets of network plugins that enforce NetworkPolicy (rke2 prefixes its own: rke2-canal),
# and of flannel, which does not.
ENFORCING = {"calico-node": "Calico", "canal": "Canal (Calico)", "cilium": "Cilium",
             "kube-router": "kube-router", "weave-net": "Weave Net", "antrea-agent": "Antrea",
             "azure-npm": "Azure NPM", "anetd": "GKE Dataplane V2"}
FLANNEL = "flannel"


def policy_name(job: str) -> str:
    return f"{job}-peers"


def render_network_policy(job: str, metadata: dict[str, Any], pod_labels: dict[str, str],
                          ports: Iterable[int]) -> dict[str, Any]:
    """The job's NetworkPolicy. `metadata`: the workspace's (labels, annotations, namespace);
    `pod_labels`: the label every pod of the job carries (and nothing else's pods do);
    `ports`: the rendezvous and store ports its watcher may reach."""
    (key, value), = pod_labels.items()
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {**metadata, "name": policy_name(job)},
            "spec": {"podSelector": {"matchLabels": dict(pod_labels)},
                     "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": {"matchLabels": dict(pod_labels)}}]},
                                 {"from": [{"podSelector": {"matchLabels": {WATCHER_LABEL: value}}}],
                                  "ports": [{"protocol": "TCP", "port": p} for p in ports]}]}}


@dataclass(frozen=True)
class Enforcement:
    """Whether the cluster enforces NetworkPolicy (None: cannot tell), and the evidence, in words."""

    enforced: bool | None
    why: str

    @property
    def setting(self) -> str:
        return {True: "enforced", False: "not enforced", None: "unknown"}[self.enforced]


def _k3s_servers(nodes: Iterable[dict[str, Any]]) -> list[list[str]]:
    """The arguments of each k3s server node (the network policy controller runs on servers)."""
    servers = []
    for node in nodes:
        raw = ((node.get("metadata") or {}).get("annotations") or {}).get(K3S_ARGS)
        try:
            args = json.loads(raw) if raw else None
        except ValueError:
            continue
        if isinstance(args, list) and args and args[0] == "server":
            servers.append([str(a) for a in args])
    return servers


def _npc_disabled(args: list[str]) -> bool:
    """k3s writes its arguments into `k3s.io/node-args` with each `--flag=value` split in two
    elements, and config-file booleans arrive as `--flag=true|false` (k3s pkg/nodeconfig
    getNodeArgs, after configfilearg.MustParse): ["--disable-network-policy", "false"] enforces."""
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag != "--disable-network-policy":
            continue
        if not eq and i + 1 < len(args) and args[i + 1].lower() in ("true", "false", "1", "0"):
            value = args[i + 1]
        if value.lower() not in ("false", "0"):
            return True
    return False


def network_policy_support(nodes: Iterable[dict[str, Any]],
                           daemonsets: list[dict[str, Any]] | None) -> Enforcement:
    """Read the evidence: a known enforcing plugin's DaemonSet, else k3s's own controller (its server
    arguments), else flannel alone. `daemonsets`: every namespace's, None when they could not be read."""
    names = [str((d.get("metadata") or {}).get("name", "")) for d in daemonsets or []]
    for name in names:
        plugin = next((p for part, p in ENFORCING.items() if part in name), None)
        if plugin:
            return Enforcement(True, f"{plugin} runs (DaemonSet {name})")
    servers = _k3s_servers(nodes)
    if servers:
        if any(_npc_disabled(args) for args in servers):
            return Enforcement(False, "k3s runs with --disable-network-policy and no other plugin enforces it")
        return Enforcement(True, "k3s's embedded network policy controller (kube-router) runs")
    flannel = [n for n in names if FLANNEL in n]
    if flannel:
        return Enforcement(False, f"flannel alone (DaemonSet {flannel[0]}) runs, and flannel does not enforce it")
    if daemonsets is None:
        return Enforcement(None, "the network plugin's DaemonSets could not be read")
    return Enforcement(None, "no network plugin geotrain knows was found among the DaemonSets")
