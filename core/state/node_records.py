"""Node records in the state store (the node pool)."""

from __future__ import annotations

import json
import sqlite3
import time

from core.errors import InvalidInput, NotFound
from core.domain.records import Node
from core.state.store import Store, loads

_COLUMNS = ("name", "host", "port", "username", "key_path", "jump", "datacenter",
            "status", "blockers", "facts", "cluster")


def _row_to_node(row: sqlite3.Row) -> Node:
    return Node(
        name=row["name"], host=row["host"], port=row["port"], username=row["username"],
        key_path=row["key_path"], jump=row["jump"], datacenter=row["datacenter"],
        status=row["status"], blockers=loads(row["blockers"], []),
        facts=loads(row["facts"], {}), cluster=row["cluster"],
    )


def list_nodes(store: Store) -> list[Node]:
    with store.read() as conn:
        return [_row_to_node(r) for r in conn.execute("SELECT * FROM nodes ORDER BY name")]


def get_node(store: Store, name: str) -> Node:
    with store.read() as conn:
        row = conn.execute("SELECT * FROM nodes WHERE name=?", (name,)).fetchone()
    if row is None:
        raise NotFound(f"no node named {name!r}", "see `geotrain nodes list`")
    return _row_to_node(row)


def _values(node: Node) -> tuple:
    return (node.name, node.host, node.port, node.username, node.key_path, node.jump,
            node.datacenter, node.status, json.dumps(node.blockers),
            json.dumps(node.facts), node.cluster)


def add_nodes(store: Store, nodes: list[Node]) -> None:
    """Insert all nodes in one transaction; a duplicate name adds none of them."""
    now = time.time()
    with store.write() as conn:
        for node in nodes:
            if conn.execute("SELECT 1 FROM nodes WHERE name=?", (node.name,)).fetchone():
                raise InvalidInput(f"a node named {node.name!r} already exists",
                                   "choose another --name, or `geotrain nodes remove` it first")
            conn.execute(
                f"INSERT INTO nodes({', '.join(_COLUMNS)}, created_at, updated_at)"
                f" VALUES ({', '.join('?' * len(_COLUMNS))}, ?, ?)",
                _values(node) + (now, now),
            )


def update_node(store: Store, node: Node) -> None:
    sets = ", ".join(f"{c}=?" for c in _COLUMNS[1:])
    with store.write() as conn:
        cur = conn.execute(f"UPDATE nodes SET {sets}, updated_at=? WHERE name=?",
                           _values(node)[1:] + (time.time(), node.name))
        if cur.rowcount == 0:
            raise NotFound(f"no node named {node.name!r}", "see `geotrain nodes list`")


def remove_node(store: Store, name: str) -> None:
    with store.write() as conn:
        if conn.execute("DELETE FROM nodes WHERE name=?", (name,)).rowcount == 0:
            raise NotFound(f"no node named {name!r}", "see `geotrain nodes list`")
