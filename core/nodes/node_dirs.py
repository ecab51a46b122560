"""Removing one deleted workspace's directory (its checkpoints) from pool nodes over SSH.

The path reaches `rm -rf` on each node as root, so it is built only from a job name matched
whole, as core.kubernetes.names.job_name makes it, under a checked absolute node directory,
and quoted: one workspace's directory and nothing above or beside it.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Callable

from core.domain.records import Node
from core.domain.recovery import check_host_path
from core.errors import GeotrainError, InvalidInput
from core.state.store import Store

JOB_DIR_RE = re.compile(r"gt-[a-z0-9]([-a-z0-9]{0,35}[a-z0-9])?")  # job_name(): "gt-…", ≤ 40

Remover = Callable[[list[str], str, str], list[str]]  # (node names, base, job) -> failures


def workspace_dir(base: str, job: str) -> str:
    """`<base>/<job>`, or a one-line refusal: nothing is removed for anything else."""
    if not JOB_DIR_RE.fullmatch(job) or not base.startswith("/"):
        raise InvalidInput(f"{base!r}/{job!r} is not a workspace's node directory: nothing is removed",
                           "this is a geotrain bug; please report it")
    return f"{check_host_path(base)}/{job}"


def remove_workspace_dir(nodes: list[Node], base: str, job: str,
                         connect: Callable[[Node], Any]) -> list[str]:
    """Remove `<base>/<job>` on every node; the nodes where that failed, as 'node: why'."""
    command = f"rm -rf -- {shlex.quote(workspace_dir(base, job))}"
    failed = []
    for node in nodes:
        try:
            conn = connect(node)
            try:
                result = conn.run(command, timeout=300, sudo=node.username != "root")
            finally:
                conn.close()
        except (GeotrainError, OSError) as exc:
            failed.append(f"{node.name}: {' '.join(str(exc).split())}")
            continue
        if result.exit_code != 0:
            said = (result.stderr or result.stdout).strip().splitlines()
            failed.append(f"{node.name}: exit code {result.exit_code}" + (f": {said[-1]}" if said else ""))
    return failed


def pool_remover(store: Store) -> Remover:
    """The removal through the node pool's SSH connections (pinned host keys, no questions)."""
    def remove(names: list[str], base: str, job: str) -> list[str]:
        from core.nodes.pool import NodePool
        from core.state.node_records import get_node

        return remove_workspace_dir([get_node(store, n) for n in names], base, job,
                                    NodePool(store).connection)
    return remove
