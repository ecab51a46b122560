"""Cluster records in the state store; `local` always exists."""

from __future__ import annotations

import json
import sqlite3
import time

from core.errors import InvalidInput, NotFound
from core.domain.records import Cluster
from core.state.store import LOCAL_CLUSTER, Store, loads


def _row_to_cluster(row: sqlite3.Row, nodes: list[str]) -> Cluster:
    return Cluster(name=row["name"], kind=row["kind"], status=row["status"],
                   config=loads(row["config"], {}), kubeconfig_path=row["kubeconfig_path"],
                   nodes=nodes)


def _members(conn: sqlite3.Connection, name: str) -> list[str]:
    rows = conn.execute("SELECT node FROM cluster_nodes WHERE cluster=? ORDER BY role DESC, node",
                        (name,))
    return [r["node"] for r in rows]


def list_clusters(store: Store) -> list[Cluster]:
    with store.read() as conn:
        rows = conn.execute(
            "SELECT * FROM clusters ORDER BY name != ?, name", (LOCAL_CLUSTER,)).fetchall()
        return [_row_to_cluster(r, _members(conn, r["name"])) for r in rows]


def get_cluster(store: Store, name: str) -> Cluster:
    with store.read() as conn:
        row = conn.execute("SELECT * FROM clusters WHERE name=?", (name,)).fetchone()
        if row is None:
            known = ", ".join(r["name"] for r in conn.execute("SELECT name FROM clusters"))
            raise NotFound(f"no cluster named {name!r}", f"known clusters: {known}")
        return _row_to_cluster(row, _members(conn, name))


def save_cluster(store: Store, cluster: Cluster, create: bool = False) -> None:
    """Insert (create=True, refusing duplicates) or update a cluster record."""
    now = time.time()
    with store.write() as conn:
        exists = conn.execute("SELECT 1 FROM clusters WHERE name=?", (cluster.name,)).fetchone()
        if create and exists:
            raise InvalidInput(f"a cluster named {cluster.name!r} already exists",
                               "choose another name or delete the existing cluster first")
        conn.execute(
            "INSERT INTO clusters(name, kind, status, config, kubeconfig_path, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET kind=excluded.kind,"
            " status=excluded.status, config=excluded.config,"
            " kubeconfig_path=excluded.kubeconfig_path, updated_at=excluded.updated_at",
            (cluster.name, cluster.kind, cluster.status, json.dumps(cluster.config),
             cluster.kubeconfig_path, now, now),
        )


def delete_cluster(store: Store, name: str) -> None:
    if name == LOCAL_CLUSTER:
        raise InvalidInput("the built-in `local` cluster cannot be deleted",
                           "it is this machine; delete its workspaces instead")
    with store.write() as conn:
        if conn.execute("DELETE FROM clusters WHERE name=?", (name,)).rowcount == 0:
            raise NotFound(f"no cluster named {name!r}", "see `geotrain clusters list`")


def network_matrix(store: Store, name: str) -> list[tuple[str, str, float | None, float | None]]:
    """Measured (src, dst, latency_ms, mbit_s) for every ordered pair of a cluster's nodes."""
    with store.read() as conn:
        rows = conn.execute("SELECT src, dst, latency_ms, mbit_s FROM net_matrix WHERE cluster=?"
                            " ORDER BY src, dst", (name,)).fetchall()
    return [(r["src"], r["dst"], r["latency_ms"], r["mbit_s"]) for r in rows]
