"""Shape and credential checks for kubeconfigs: a node's, and the user's ~/.kube/config.

A kubeconfig fetched from a k3s server is data from a machine that may be compromised:
an `exec:` credential plugin or `auth-provider` in it would run code on the user's
machine at the next API call. From a node only certificate or token credentials are
taken, and only the fields geotrain knows are copied.
"""

from __future__ import annotations

from core.errors import InvalidInput

SECTIONS = ("clusters", "users", "contexts")
# Fields copied from a node's kubeconfig; anything else (proxy-url, extensions…) is dropped.
CLUSTER_FIELDS = ("certificate-authority-data", "tls-server-name")
CERT_FIELDS = ("client-certificate-data", "client-key-data")
REFUSED_USER_FIELDS = ("exec", "auth-provider")


def entries(data: object, section: str, where: str) -> list[dict]:
    """`data[section]` as a list of named mappings, or a one-line InvalidInput."""
    if not isinstance(data, dict):
        raise InvalidInput(f"{where} is not a kubeconfig mapping", "fix or move the file")
    value = data.get(section)
    if value is None:
        return []
    inner = section[:-1]
    if not isinstance(value, list) or not all(
            isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get(inner, {}), dict)
            for e in value):
        raise InvalidInput(f"{where}: `{section}` must be a list of entries with a name and a "
                           f"`{inner}` mapping, found {type(value).__name__} {str(value)[:60]!r}",
                           "fix or move the file (kubectl config view shows the expected shape)")
    return value


def node_credentials(user: dict, node: str) -> dict:
    """The user entry's credentials when they are a client certificate or a token."""
    for field in REFUSED_USER_FIELDS:
        if field in user:
            raise InvalidInput(
                f"the kubeconfig on {node} uses an `{field}` credential, which would run a "
                "program on this machine: refused", "a k3s server writes client certificates; "
                "check the node has not been tampered with, then redeploy the kubeconfig step")
    if all(isinstance(user.get(f), str) and user[f] for f in CERT_FIELDS):
        return {f: user[f] for f in CERT_FIELDS}
    if isinstance(user.get("token"), str) and user["token"]:
        return {"token": user["token"]}
    raise InvalidInput(f"the kubeconfig on {node} has no client certificate or token",
                       "check /etc/rancher/k3s/k3s.yaml on the server, then redeploy")


def node_cluster(cluster: dict) -> dict:
    return {f: cluster[f] for f in CLUSTER_FIELDS if isinstance(cluster.get(f), str)}
