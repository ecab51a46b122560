"""A private `--image` registry: the workspace's own pull secret and the pods that use it.

The credential is a workspace token like the W&B and HF ones (kind "registry", "user:password",
in the 0600 secret store under "<workspace>/registry"; core.state.secret_store). It never
reaches the trainer's environment: here it becomes one Secret of type
kubernetes.io/dockerconfigjson per workspace, created before the Job and deleted with it, that
every pod names in `imagePullSecrets`, so kubelet pulls the image with it. Kubernetes docs:
"Images", Specifying imagePullSecrets on a Pod
(https://kubernetes.io/docs/concepts/containers/images/#specifying-imagepullsecrets-on-a-pod),
and "Pull an Image from a Private Registry"
(https://kubernetes.io/docs/tasks/configure-pod-container/pull-image-private-registry/) for
the .dockerconfigjson layout: {"auths": {HOST: {"username", "password", "auth": base64(user:password)}}}.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from core.errors import InvalidInput
from core.kubernetes.names import job_name

REGISTRY_ENV = "GEOTRAIN_REGISTRY_AUTH"  # its name among a workspace's tokens; never a pod's env
_USER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")


def registry_host(image: str) -> str:
    """The registry an image reference names: its first path part when that has a dot or a
    port or is localhost, else Docker Hub (distribution/reference, normalize.go: splitDockerDomain)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def check_registry_auth(value: str) -> tuple[str, str]:
    """(user, password) from "user:password"; bad input refused in one line, the password never said."""
    user, sep, password = value.partition(":")
    if not sep or not _USER.fullmatch(user) or not password or any(c.isspace() or not c.isprintable() for c in password):
        raise InvalidInput("the registry credential must be USER:PASSWORD (a plain user name; a password without "
                           "spaces or control characters)", "give --registry-user USER and the password in "
                           "GEOTRAIN_REGISTRY_PASSWORD or at the hidden prompt")
    return user, password


def pull_secret_name(workspace_id: str) -> str:
    return f"{job_name(workspace_id)}-registry"


def split_registry_auth(tokens: dict[str, str]) -> tuple[dict[str, str], str | None]:
    """(the trainer's tokens, the registry credential or None): the credential leaves the trainer's Secret."""
    rest = {name: value for name, value in tokens.items() if name != REGISTRY_ENV}
    return rest, tokens.get(REGISTRY_ENV)


def render_pull_secret(name: str, metadata: dict[str, Any], image: str, auth: str) -> dict[str, Any]:
    """The workspace's kubernetes.io/dockerconfigjson Secret for `image`'s registry
    ("<hidden>", as a dry run passes it, renders a placeholder of the same shape)."""
    user, password = ("<hidden>", "<hidden>") if auth == "<hidden>" else check_registry_auth(auth)
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    config = {"auths": {registry_host(image): {"username": user, "password": password, "auth": encoded}}}
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
            "metadata": {**metadata, "name": name}, "stringData": {".dockerconfigjson": json.dumps(config)}}


def with_pull_secret(manifests: list[dict[str, Any]], workspace_id: str, image: str,
                     auth: str | None) -> list[dict[str, Any]]:
    """The manifests with the pull Secret before the first that makes pods (the watcher's
    Deployment, which runs the same image, then the Job, the last) and every pod naming it."""
    if not auth:
        return manifests
    job = manifests[-1]
    name = pull_secret_name(workspace_id)
    metadata = {k: v for k, v in job["metadata"].items() if k != "name"}
    templates = [task["template"] for task in job["spec"]["tasks"]]
    templates += [o["spec"]["template"] for o in manifests if o.get("kind") == "Deployment"]
    for template in templates:
        template["spec"]["imagePullSecrets"] = [{"name": name}]
    first = next(i for i, o in enumerate(manifests) if o.get("kind") in ("Deployment", "Job"))
    return [*manifests[:first], render_pull_secret(name, metadata, image, auth), *manifests[first:]]
