"""The cluster's kubeconfig: fetched from the server, rewritten, stored per cluster.

k3s writes a kubeconfig for https://127.0.0.1:6443 with entries named `default`; the
stored copy points at the server's public address (in the certificate's SANs) and names
everything after the cluster, so it can be merged into ~/.kube/config beside others.
"""

from __future__ import annotations

import shlex
import socket
import urllib.parse
from pathlib import Path

import yaml

from core.state.atomic_files import write_atomically
from core.state import paths
from core.bootstrap import k3s
from core.bootstrap.kubeconfig_checks import entries, node_cluster, node_credentials
from core.bootstrap.plan import DeployContext, NodeTarget
from core.bootstrap.runner import Phase, Step
from core.bootstrap.session import StepFailed
from core.errors import InvalidInput
from core.schema.yaml_loader import MalformedYaml, load_yaml


def cluster_kubeconfig_path(cluster: str) -> Path:
    return paths.home() / "clusters" / cluster / "kubeconfig"


def rewrite(text: str, cluster: str, server_url: str, node: str = "the server") -> str:
    """A fresh kubeconfig for `cluster` at `server_url`, with only the node's CA and its
    certificate or token credentials (an `exec` plugin or auth-provider is refused)."""
    try:
        data = load_yaml(text, f"the kubeconfig on {node}") or {}
        clusters = entries(data, "clusters", f"the kubeconfig on {node}")
        users = entries(data, "users", f"the kubeconfig on {node}")
        if not clusters or not users:
            raise StepFailed(f"the kubeconfig on {node} has no cluster or user entry")
        user = node_credentials(users[0].get("user") or {}, node)
    except MalformedYaml as exc:
        raise StepFailed(f"the kubeconfig on {node} is not valid YAML ({exc.problem})") from None
    except InvalidInput as exc:
        raise StepFailed(exc.message) from None
    entry = {**node_cluster(clusters[0].get("cluster") or {}), "server": server_url}
    fresh = {"apiVersion": "v1", "kind": "Config", "preferences": {},
             "clusters": [{"name": cluster, "cluster": entry}],
             "users": [{"name": cluster, "user": user}],
             "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": cluster}}],
             "current-context": cluster}
    return yaml.safe_dump(fresh, sort_keys=False)


def write_private(path: Path, text: str) -> None:
    """Write a credentials file with mode 0600 from the start (no readable window)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomically(path, text)


def _fetch(ctx: DeployContext, target: NodeTarget) -> str:
    plan = ctx.plan
    result = target.session.fact(f"cat {shlex.quote(plan.k3s.config_dir + '/k3s.yaml')}")
    if ctx.dry_run:
        return "kubeconfig fetch skipped (dry run)"
    if not result.ok:
        raise StepFailed(f"no kubeconfig at {plan.k3s.config_dir}/k3s.yaml on {target.name}: "
                         "run the k3s step first")
    server = k3s.api_url(plan)  # the same host k3s.tls_sans puts in the certificate
    path = cluster_kubeconfig_path(plan.name)
    text = rewrite(result.stdout, plan.name, server, target.name)
    if not path.exists() or path.read_text() != text:
        write_private(path, text)
    ctx.put_shared("kubeconfig_path", str(path))
    unreachable = api_unreachable(server)
    if unreachable:  # the cluster is built; workspaces are deployed from this machine
        return (f"kubeconfig stored ({server}); warning: this machine cannot reach it ({unreachable}): "
                f"open TCP {k3s.API_PORT} on {target.name} to this machine, or tunnel it "
                f"(ssh -L {k3s.API_PORT}:127.0.0.1:{k3s.API_PORT} {target.name}) and use https://127.0.0.1:{k3s.API_PORT}")
    return f"kubeconfig stored ({server})"


def api_unreachable(server: str, timeout: float = 5.0) -> str:
    """Why this machine cannot open a TCP connection to the API server's URL, '' when it can
    (only the connection: TLS and credentials are kubectl's and the client's to judge)."""
    url = urllib.parse.urlsplit(server)
    try:
        port = url.port or 443
        with socket.create_connection((url.hostname or "", port), timeout=timeout):
            return ""
    except (OSError, ValueError) as exc:
        if isinstance(exc, TimeoutError):
            return "timed out"
        return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


STEP = Step("kubeconfig", [Phase("fetch", _fetch,
                                 lambda ctx, alive: [t for t in alive if t.spec.role == "server"])])
