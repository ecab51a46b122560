"""Registering a Kubernetes cluster that already runs Volcano (not built by the wizard).

Registration reads the node list once, so manifests can place one worker per node and
`--dry-run` works later without contacting the cluster. It also reads whether the network
plugin enforces the NetworkPolicy that fences each workspace (core.kubernetes.network_policy).
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
from core.kubernetes.manifests import DEFAULT_QUEUE, RDZV_PORT, render_volcano_job
from core.kubernetes.network_policy import NETWORK_POLICY_KEY, Enforcement, network_policy_support
from core.domain.records import NAME_RE, Cluster, WorkspaceSpec
from core.kubernetes.pod_security import ENFORCE_LABEL, LEVELS, POD_SECURITY_KEY, pod_specs, violations
from core.schema.user_files import read_user_file
from core.kubernetes.node_groups import NodeGroup, groups_from_kubernetes
from core.kubernetes.pod_logs import read_json
from core.state.store import Store
from core.schema.yaml_loader import load_yaml


@dataclass
class Registration:
    cluster: Cluster
    groups: list[NodeGroup]
    queue_found: bool
    pod_security: str = ""  # one line: the namespace's enforced level, and whether pods pass
    pod_security_note: str = ""  # hostPath users: refused from "baseline" up
    network_policy: str = ""  # one line: whether the network plugin enforces the workspaces' NetworkPolicy


def _context(kubeconfig: Path, wanted: str | None) -> tuple[str, str]:
    """The context to use and its namespace; refuses a context the file lacks."""
    hint = "pass the kubeconfig file that kubectl uses for this cluster"
    load_yaml(read_user_file(kubeconfig, "--kubeconfig", hint), f"--kubeconfig {kubeconfig}")  # bounded first
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


def _probe(cluster: Cluster, queue: str) -> tuple[list[dict], bool]:
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
    return nodes, queue_found


def _daemonsets(cluster: Cluster) -> list[dict] | None:
    """Every namespace's DaemonSets (the network plugin runs as one); None when not readable."""
    try:
        with api_errors(cluster, "listing DaemonSets (which network plugin runs)"):
            return read_json(client.AppsV1Api(load_api_client(cluster)).list_daemon_set_for_all_namespaces(
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT)).get("items", [])
    except ApiError as exc:
        if exc.status not in (403, 404):
            raise
        return None


def _network_policy_line(cluster: Cluster, found: Enforcement, unenforced_ok: bool) -> str:
    """Refuse a cluster whose plugin ignores NetworkPolicy (unless the user says every pod there is
    trusted); one line saying what was found otherwise."""
    exposed = (f"any pod that can route to a workspace's pods can reach its rendezvous port {RDZV_PORT}, "
               "and torchrun unpickles what it reads there")
    if found.enforced is False and not unenforced_ok:
        raise InvalidInput(f"cluster {cluster.name!r} does not enforce NetworkPolicy ({found.why}): {exposed}",
                           "use a network plugin that enforces it (k3s without --disable-network-policy, "
                           "Calico, Cilium), or register with --without-network-policy if every pod there is trusted")
    if found.enforced:
        return (f"Network policy: enforced ({found.why}): each workspace's pods admit only its own pods "
                "and its watcher.")
    return f"warning: NetworkPolicy may not be enforced on cluster {cluster.name!r} ({found.why}): {exposed}."


def register_kubernetes_cluster(store: Store, name: str, kubeconfig: str,
                                context: str | None = None, namespace: str | None = None,
                                queue: str | None = None, unenforced_ok: bool = False) -> Registration:
    """Check the kubeconfig, Volcano, the nodes and the network plugin, then record the cluster.
    `unenforced_ok`: register even where NetworkPolicy is known not to be enforced."""
    if not NAME_RE.fullmatch(name or ""):
        raise InvalidInput(f"cluster name {name!r} is not valid",
                           "use 1-32 lower-case letters, digits and dashes, e.g. gpu-east")
    path = Path(kubeconfig).expanduser().resolve()
    if not path.is_file():
        problem = "not a regular file" if path.exists() else "no such file"
        raise InvalidInput(f"--kubeconfig {kubeconfig}: {problem}",
                           "pass the kubeconfig file that kubectl uses for this cluster")
    context_name, context_namespace = _context(path, context)
    queue = queue or DEFAULT_QUEUE
    cluster = Cluster(name=name, kind="kubernetes", kubeconfig_path=str(path),
                      config={"context": context_name,
                              "namespace": namespace or context_namespace, "queue": queue})
    if any(c == name for c in _cluster_names(store)):
        raise InvalidInput(f"a cluster named {name!r} already exists",
                           "choose another name or delete the existing cluster first")
    nodes, queue_found = _probe(cluster, queue)
    groups = groups_from_kubernetes(nodes)
    if not groups:
        raise InvalidInput(f"cluster {name!r} has no schedulable nodes",
                           "add nodes to it (or uncordon them) and register again")
    cluster.config["node_groups"] = [g.to_dict() for g in groups]
    fence = network_policy_support(nodes, _daemonsets(cluster))
    network_line = _network_policy_line(cluster, fence, unenforced_ok)
    cluster.config[NETWORK_POLICY_KEY] = fence.setting
    level = _enforced_level(cluster)
    if level:
        cluster.config[POD_SECURITY_KEY] = level  # deploy checks its pods against it
    save_cluster(store, cluster, create=True)
    return Registration(cluster, groups, queue_found, *_pod_security_lines(cluster, groups, level), network_line)


def _enforced_level(cluster: Cluster) -> str | None:
    """The namespace's `pod-security.kubernetes.io/enforce` label; "" when unlabelled,
    None when the namespace cannot be read (a namespaced user may not get namespaces)."""
    namespace = cluster.config["namespace"]
    try:
        with api_errors(cluster, f"reading namespace {namespace}'s Pod Security labels"):
            body = read_json(client.CoreV1Api(load_api_client(cluster)).read_namespace(
                namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT))
    except ApiError as exc:
        if exc.status not in (403, 404):
            raise
        return None
    return str(((body.get("metadata") or {}).get("labels") or {}).get(ENFORCE_LABEL, ""))


def _pod_security_lines(cluster: Cluster, groups: list[NodeGroup], level: str | None) -> tuple[str, str]:
    """What Pod Security admission would do to the pods geotrain renders here (core.kubernetes.pod_security)."""
    namespace = cluster.config["namespace"]
    note = ("note: a checkpoint directory on the node (hostPath, e.g. recovery.host_path) is refused "
            "in this namespace; keep checkpoints on a claim (recovery.pvc).")
    if level is None:
        return (f"Pod Security: namespace {namespace!r} could not be read; geotrain's pods pass "
                "'restricted' with checkpoints on a claim (recovery.pvc).", "")
    if level in ("", "privileged"):
        what = "enforces 'privileged'" if level else "has no enforce label (the cluster default applies)"
        return f"Pod Security: namespace {namespace!r} {what}: geotrain's pods are admitted.", ""
    checked = level if level in LEVELS else "restricted"  # admission reads a bad value as restricted
    on_claim = _sample_violations(cluster, groups, checked, {"pvc": "geotrain-checkpoints"})
    default = _sample_violations(cluster, groups, checked, {})
    if on_claim:
        verdict = f"geotrain's pods would be refused ({on_claim[0]})."
    elif default:
        verdict = ("geotrain's pods pass it with checkpoints on a claim (recovery.pvc); the default "
                   f"is refused ({default[0]}).")
    else:
        verdict = "geotrain's pods pass it."
    return f"Pod Security: namespace {namespace!r} enforces {level!r}: {verdict}", note


def _sample_violations(cluster: Cluster, groups: list[NodeGroup], level: str,
                       recovery: dict) -> list[str]:
    """The checks a job on every node of the cluster fails at `level`."""
    spec = WorkspaceSpec(cluster=cluster.name, model="gpt-neo", size="tiny", preset="low", steps=1,
                         workers=sum(len(g.hostnames) for g in groups), recovery=recovery)
    job = render_volcano_job("pod-security-check", spec, cluster, groups, cluster.config["namespace"])
    return sorted({v for _, pod in pod_specs(job) for v in violations(pod, level)})


def _cluster_names(store: Store) -> list[str]:
    with store.read() as conn:
        return [r["name"] for r in conn.execute("SELECT name FROM clusters")]
