"""Cordon and uncordon a node (issue 43): a node `clusters check` names as failing is kept from new pods
with one key. As `kubectl cordon` does (k8s.io/kubectl/pkg/drain/cordon.go, PatchOrReplaceWithContext):
a strategic merge patch of the Node's spec.unschedulable through the official client, `true` to cordon
and `null` (the field is omitempty) to uncordon. Pods already running stay; nothing is drained.

Here and not in core/nodes: only core/kubernetes imports the client (tests/test_import_contract.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from core.domain.records import Cluster
from core.errors import InvalidInput, NotFound
from core.kubernetes.client import REQUEST_TIMEOUT, api_errors, load_api_client
from core.state.cluster_records import get_cluster, list_clusters
from core.state.store import LOCAL_CLUSTER, Store

# a Node's name is a DNS subdomain (RFC 1123): lowercase letters, digits, '-' and '.', at most 253
NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


@dataclass(frozen=True)
class CordonResult:
    cluster: str
    node: str
    unschedulable: bool  # as the API server answered
    changed: bool  # False: it already was

    def sentence(self) -> str:
        state = "cordoned: no new pods are scheduled on it" if self.unschedulable else "schedulable again"
        return f"{self.node} on {self.cluster} {'is now' if self.changed else 'was already'} {state}."


def why_not_applicable(cluster: Cluster) -> str:
    """'' when the cluster has a scheduler to cordon from; else one line saying why not."""
    if cluster.kind == "local" or cluster.name == LOCAL_CLUSTER:
        return (f"cluster {cluster.name!r} runs worker processes on this machine: there is no scheduler to keep "
                "them off a node (stop the workspace instead)")
    if not cluster.kubeconfig_path:
        return f"cluster {cluster.name!r} has no kubeconfig yet (its k3s step has not run): nothing to cordon on"
    return ""


def check_node_name(node: str) -> str:
    if not isinstance(node, str) or not NODE_NAME.fullmatch(node):
        raise InvalidInput(f"{node!r} is not a node name (lowercase letters, digits, '-' and '.')",
                           "use a name `geotrain clusters check NAME` or `kubectl get nodes` shows")
    return node


def cluster_of(store: Store, node: str, cluster: str | None = None) -> Cluster:
    """The named cluster, or the one cluster with a kubeconfig that lists the node."""
    if cluster:
        return get_cluster(store, cluster)
    holders = [c for c in list_clusters(store) if c.kubeconfig_path and node in c.nodes]
    if len(holders) == 1:
        return holders[0]
    if not holders:
        raise NotFound(f"no cluster built here lists node {node!r}", "name its cluster with --cluster NAME")
    raise InvalidInput(f"node {node!r} is in {len(holders)} clusters ({', '.join(c.name for c in holders)})",
                       "name one with --cluster NAME")


def set_cordon(store: Store, node: str, cordon: bool, cluster: str | None = None) -> CordonResult:
    """Patch the Node's spec.unschedulable; InvalidInput (one line) where the cluster has no scheduler."""
    check_node_name(node)
    record = cluster_of(store, node, cluster)
    if why := why_not_applicable(record):
        raise InvalidInput(f"cannot {'cordon' if cordon else 'uncordon'} {node}: {why}",
                           "cordon nodes of a Kubernetes or wizard-built (k3s) cluster")
    api = client.CoreV1Api(load_api_client(record))
    with api_errors(record, f"{'cordoning' if cordon else 'uncordoning'} node {node}"):
        try:
            before = api.read_node(node, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                raise NotFound(f"cluster {record.name!r} has no node {node!r}",
                               f"see the node names with `kubectl get nodes` on {record.name}") from None
            raise
        was = bool(before.spec and before.spec.unschedulable)
        if was == cordon:
            return CordonResult(record.name, node, was, False)
        after = api.patch_node(node, {"spec": {"unschedulable": True if cordon else None}},
                               _request_timeout=REQUEST_TIMEOUT)
    return CordonResult(record.name, node, bool(after.spec and after.spec.unschedulable), True)
