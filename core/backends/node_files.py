"""A deleted Kubernetes workspace's files outside the API: its checkpoint directory on the
nodes (core.kubernetes.recovery_manifests.node_dir_base), when it used one.

On a cluster geotrain built, the directory goes over SSH from every node (the `remove` the
workspace service hands in: core.nodes.node_dirs, which backends may not import), once the
workspace's pods are gone, so kubelet cannot make it again for a pod still starting.
Elsewhere geotrain cannot reach the nodes: kept_after_delete says where it stays, in the
delete's confirmation text.
"""

from __future__ import annotations

import time
from typing import Callable

from core.domain.records import Cluster, WorkspaceSpec
from core.domain.recovery import RecoverySettings
from core.errors import BackendError
from core.kubernetes.recovery_manifests import node_dir_base

PODS_GONE_TIMEOUT_S = 120.0  # a pod's grace period (30 s by default) and then some


def remove(cluster: Cluster, workspace_id: str, job: str, spec: WorkspaceSpec,
           pods_left: Callable[[], bool], remove_dirs: Callable[[list[str], str, str], list[str]],
           timeout: float = PODS_GONE_TIMEOUT_S, poll_s: float = 1.0) -> None:
    """Remove the workspace's node directory on every node of a cluster geotrain built."""
    base = node_dir_base(RecoverySettings.from_dict(spec.recovery), spec.workers)
    if base is None or cluster.kind != "geotrain" or not cluster.nodes:
        return
    deadline = time.monotonic() + timeout
    while pods_left():
        if time.monotonic() > deadline:
            raise BackendError(f"the pods of {workspace_id} are still stopping after {timeout:.0f} s, "
                               f"so its checkpoints stay in {base}/{job} on the nodes for now",
                               f"run `geotrain workspaces delete {workspace_id}` again")
        time.sleep(poll_s)
    failed = remove_dirs(cluster.nodes, base, job)
    if failed:
        raise BackendError(f"the checkpoints of {workspace_id} stay in {base}/{job} on "
                           f"{len(failed)} node(s) ({failed[0]})",
                           f"bring the node back and run `geotrain workspaces delete {workspace_id}` again")
