"""Workspace backends: one interface, one implementation per cluster kind.

Imports core.kubernetes, core.state, core.domain, core.schema, core.errors.
"""

from __future__ import annotations

from core.backends.base import Backend
from core.domain.records import Cluster


def backend_for(cluster: Cluster) -> Backend:
    """The backend that runs workspaces on `cluster`."""
    if cluster.kind == "local":
        from core.backends.local.backend import LocalBackend

        return LocalBackend()
    from core.backends.kubernetes import KubernetesBackend  # geotrain or registered clusters

    return KubernetesBackend(cluster)
