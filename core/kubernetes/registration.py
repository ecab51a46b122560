"""Registering a Kubernetes cluster that already runs Volcano (not built by the wizard).

Registration reads the node list once, so manifests can place one worker per node and
`--dry-run` works later without contacting the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes import client, config

from core.state.cluster_records import save_cluster
from core.errors import InvalidInput
from core.kubernetes.client import (REQUEST_TIMEOUT, SCHEDULING_GROUP, SCHEDULING_VERSION, ApiError,
                              api_errors, check_volcano, load_api_client)
from core.kubernetes.manifests import DEFAULT_QUEUE
from core.domain.records import NAME_RE, Cluster
from core.kubernetes.node_groups import NodeGroup, groups_from_kubernetes
from core.kubernetes.pod_logs import read_json
from core.state.store import Store


@dataclass
class Registration:
    cluster: Cluster
    groups: list[NodeGroup]
    queue_found: bool


def _context(kubeconfig: Path, wanted: str | None) -> tuple[str, str]:
    """The context to use and its namespace; refuses a context the file lacks."""
    try:
        contexts, current = config.list_kube_config_contexts(config_file=str(kubeconfig))
    except (config.ConfigException, yaml.YAMLError, OSError, UnicodeDecodeError, TypeError, KeyError,
            AttributeError) as exc:
        raise InvalidInput(f"--kubeconfig {kubeconfig}: not a usable kubeconfig ({exc})",
                           "pass the kubeconfig file that kubectl uses for this cluster") from None
    names = [c["name"] for c in contexts]
    name = wanted or (current or {}).get("name")
    if name not in names:
        raise InvalidInput(f"--context {name!r} is not in {kubeconfig}",
                           f"use one of: {', '.join(names) or '(none)'}")
    chosen = next(c for c in contexts if c["name"] == name)
    return name, (chosen.get("context") or {}).get("namespace") or "default"


def _probe(cluster: Cluster, queue: str) -> tuple[list[NodeGroup], bool]:
    api = load_api_client(cluster)
    check_volcano(cluster, api)
    with api_errors(cluster, "listing nodes (geotrain places one worker per node)"):
        nodes = read_json(client.CoreV1Api(api).list_node(
            _preload_content=False, _request_timeout=REQUEST_TIMEOUT)).get("items", [])
    try:
        with api_errors(cluster, "reading the Volcano queue"):
            client.CustomObjectsApi(api).get_cluster_custom_object(
                SCHEDULING_GROUP, SCHEDULING_VERSION, "queues", queue,
                _request_timeout=REQUEST_TIMEOUT)
        queue_found = True
    except ApiError as exc:
        if exc.status not in (403, 404):
            raise
        queue_found = False
    return groups_from_kubernetes(nodes), queue_found


def register_kubernetes_cluster(store: Store, name: str, kubeconfig: str,
                                context: str | None = None, namespace: str | None = None,
                                queue: str | None = None) -> Registration:
    """Check the kubeconfig, Volcano and the nodes, then record the cluster."""
    if not NAME_RE.match(name or ""):
        raise InvalidInput(f"cluster name {name!r} is not valid",
                           "use 1-32 lower-case letters, digits and dashes, e.g. gpu-east")
    path = Path(kubeconfig).expanduser().resolve()
    if not path.is_file():
        raise InvalidInput(f"--kubeconfig {kubeconfig}: no such file",
                           "pass the kubeconfig file that kubectl uses for this cluster")
    context_name, context_namespace = _context(path, context)
    queue = queue or DEFAULT_QUEUE
    cluster = Cluster(name=name, kind="kubernetes", kubeconfig_path=str(path),
                      config={"context": context_name,
                              "namespace": namespace or context_namespace, "queue": queue})
    if any(c == name for c in _cluster_names(store)):
        raise InvalidInput(f"a cluster named {name!r} already exists",
                           "choose another name or delete the existing cluster first")
    groups, queue_found = _probe(cluster, queue)
    if not groups:
        raise InvalidInput(f"cluster {name!r} has no schedulable nodes",
                           "add nodes to it (or uncordon them) and register again")
    cluster.config["node_groups"] = [g.to_dict() for g in groups]
    save_cluster(store, cluster, create=True)
    return Registration(cluster, groups, queue_found)


def _cluster_names(store: Store) -> list[str]:
    with store.read() as conn:
        return [r["name"] for r in conn.execute("SELECT name FROM clusters")]
