"""The official `kubernetes` client for one cluster, with bounded timeouts and plain errors.

Every API failure a user can meet (unreachable server, Volcano missing, a name taken,
missing RBAC rights) becomes a BackendError naming the cluster and what to do.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from core.errors import BackendError, InvalidInput
from core.schema.user_files import read_user_file
from core.domain.records import Cluster
from core.schema.yaml_loader import load_yaml

REQUEST_TIMEOUT = (5, 30)  # seconds: connect, read
VOLCANO_GROUP, VOLCANO_VERSION = "batch.volcano.sh", "v1alpha1"
SCHEDULING_GROUP, SCHEDULING_VERSION = "scheduling.volcano.sh", "v1beta1"
NETWORK_ERRORS = (urllib3.exceptions.HTTPError, OSError)


class ApiError(BackendError):
    """The API server answered with an error; `status` is its HTTP code."""

    def __init__(self, message: str, hint: str, status: int) -> None:
        super().__init__(message, hint)
        self.status = status


def load_api_client(cluster: Cluster) -> client.ApiClient:
    """An ApiClient from the cluster's kubeconfig and context; contacts nothing."""
    path = cluster.kubeconfig_path
    if not path:
        raise InvalidInput(f"cluster {cluster.name!r} has no kubeconfig",
                           "register it with `geotrain clusters add-kubernetes "
                           f"{cluster.name} --kubeconfig PATH`")
    if not Path(path).is_file():
        raise InvalidInput(f"kubeconfig {path} of cluster {cluster.name!r} does not exist",
                           "restore the file or register the cluster again")
    configuration = client.Configuration()
    load_yaml(read_user_file(path, "kubeconfig", "restore the file or register the cluster again"),
              f"kubeconfig {path}")  # the library's own parse has no limits
    try:
        config.load_kube_config(config_file=path, context=cluster.config.get("context"),
                                client_configuration=configuration, persist_config=False)
    except (config.ConfigException, yaml.YAMLError, ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(f"kubeconfig {path}: {str(exc).strip() or type(exc).__name__}",
                           "check the file, and that the --context names one of its contexts") from None
    configuration.retries = urllib3.util.Retry(total=2, connect=2, read=0, status=0,
                                               backoff_factor=0.2)
    configuration.keep_alive = True  # long log follows survive idle proxies
    return client.ApiClient(configuration)


def _server_message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body or "{}").get("message") or exc.reason or ""
    except (ValueError, AttributeError):
        return str(exc.body or exc.reason or "")[:200]


@contextmanager
def api_errors(cluster: Cluster, action: str, namespace: str = "default",
               volcano: bool = False) -> Iterator[None]:
    """Turn client and network failures inside the block into one clear BackendError.

    `volcano` says the block calls the Volcano API, where a 404 on a collection means
    the CRD is not installed.
    """
    name = cluster.name
    try:
        yield
    except ApiException as exc:
        message = _server_message(exc)
        if exc.status == 403:
            raise ApiError(f"{action} on cluster {name!r}: permission denied ({message})",
                           f"ask the cluster admin for the rights (RBAC) to do this in "
                           f"namespace {namespace!r}", 403) from None
        if exc.status == 401:
            raise ApiError(f"{action} on cluster {name!r}: credentials rejected",
                           "refresh the kubeconfig's credentials and try again", 401) from None
        if exc.status == 409:
            raise ApiError(f"{action} on cluster {name!r}: already exists ({message})",
                           "delete the existing workspace first, or deploy under a new name",
                           409) from None
        if exc.status == 404 and volcano:
            raise volcano_missing(cluster) from None
        raise ApiError(f"{action} on cluster {name!r} failed: HTTP {exc.status} {message}",
                       "the API server refused the request; see its message", exc.status) from None
    except NETWORK_ERRORS as exc:
        raise BackendError(f"cannot reach the Kubernetes API of cluster {name!r}: "
                           f"{_network_reason(exc)}",
                           "check that the cluster is up and the kubeconfig's server address "
                           "is reachable from here") from None


def _network_reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    text = str(reason)
    return text.split(": ", 1)[-1] if "Connection refused" in text else text[:200]


def volcano_missing(cluster: Cluster) -> BackendError:
    return BackendError(
        f"cluster {cluster.name!r} does not serve {VOLCANO_GROUP}/{VOLCANO_VERSION} Jobs: "
        f"is Volcano installed on cluster {cluster.name}?",
        "install Volcano (https://volcano.sh/en/docs/installation/) or pick another cluster")


def check_volcano(cluster: Cluster, api: client.ApiClient) -> None:
    """Raises when the Volcano Job CRD is not served (before anything is submitted)."""
    with api_errors(cluster, "checking for Volcano", volcano=True):
        resources = client.CustomObjectsApi(api).get_api_resources(
            VOLCANO_GROUP, VOLCANO_VERSION, _request_timeout=REQUEST_TIMEOUT)
    if not any(r.name == "jobs" for r in (resources.resources or [])):
        raise volcano_missing(cluster)
