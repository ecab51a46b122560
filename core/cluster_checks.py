"""`clusters check` as a service (issue 43): the CLI and the app run a cluster's check and read the
kept result through here. The kind of cluster picks the way: `local` (this machine as one node,
core.backends.local.cluster_check), a cluster geotrain built over SSH (core.bootstrap.check_over_ssh:
every node, every link over the mesh), a registered Kubernetes cluster (the Volcano check job,
core.kubernetes.check_job). The result is kept in the state database (settings 'cluster_check/NAME')."""

from __future__ import annotations

from typing import Callable

from core.errors import InvalidInput
from core.state.check_records import SETTING, keep, last_check  # noqa: F401 (the app's and CLI's way in)
from core.state.cluster_records import get_cluster
from core.state.store import LOCAL_CLUSTER, Store

DEFAULT_SECONDS = 3.0


def payload_bytes(model: str, size: str | None, preset: str) -> int:
    """What one rank hands the collective per sync for the model under the preset (the planner's figure)."""
    from core.domain import recipe_catalog
    from core.planner.cluster_inputs import default_size, model_params
    from core.planner.wan_what_if import exchange_for

    recipe_catalog.check_choice("preset", preset, list(recipe_catalog.presets()), "--preset")
    params = model_params(model, size or default_size(model))
    return exchange_for(recipe_catalog.presets()[preset], params).payload_bytes


def run_check(store: Store, name: str, *, seconds: float = DEFAULT_SECONDS, model: str = "gpt-neo",
              size: str | None = None, preset: str = "medium", python: str | None = None,
              progress: Callable[[str], None] | None = None, shell_factory=None, api=None) -> dict:
    """Check the cluster's devices and links, keep the result, return it. `shell_factory` (SSH) and
    `api` (Kubernetes) are for tests; production uses the node pool's connections and the kubeconfig."""
    cluster = get_cluster(store, name)
    payload = payload_bytes(model, size, preset)
    if cluster.kind == "local" or name == LOCAL_CLUSTER:
        from core.backends.local.cluster_check import check_local

        result = {**check_local(seconds, payload), "kind": "local"}
    elif cluster.kind == "geotrain":
        from core.bootstrap.check_over_ssh import check_ssh_cluster

        result = check_ssh_cluster(store, name, seconds, payload, python, progress, shell_factory)
    elif cluster.kind == "kubernetes":
        from core.backends.kubernetes_check import check_kubernetes_cluster

        result = check_kubernetes_cluster(store, cluster, seconds, payload, progress, api)
    else:
        raise InvalidInput(f"cluster {name!r} is of a kind this version cannot check ({cluster.kind!r})",
                           "upgrade geotrain")
    result["payload"] = {"model": model, "size": size, "preset": preset, "bytes": payload}
    keep(store, name, result)
    return result
