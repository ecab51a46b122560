"""Test hosts as pool nodes: records in the store and SSH shells that trust their keys.

Builds on tests.testhosts (netns + real sshd per host). The wizard's suites use the
`gtw` prefix and 10.202.0.0/24 (mesh 10.203.0.0/24) so they can run beside the node
pool's suites.
"""

from __future__ import annotations

from core.models import Node
from core.nodes import add_nodes
from core.ssh import Connection
from core.store import Store
from tests.testhosts import TestHost

PREFIX = "gtw"
SUBNET = "10.202.0.0/24"
MESH_SUBNET = "10.203.0.0/24"


def add_host_nodes(store: Store, hosts: list[TestHost]) -> list[str]:
    """Put the hosts into the node pool (named as the hosts); returns their names."""
    add_nodes(store, [Node(name=h.name, host=h.ip, port=h.port, username=h.user,
                           key_path=h.key_path, status="AVAILABLE") for h in hosts])
    return [h.name for h in hosts]


class ShellFactory:
    """Opens real SSH connections to the test hosts; can cut one host's SSH on demand."""

    def __init__(self, hosts: list[TestHost]) -> None:
        self.trusted = {h.ip: h.fingerprint for h in hosts}
        self.connections: list[Connection] = []

    def __call__(self, node: Node) -> Connection:
        conn = Connection(node.host, node.port, node.username, key_path=node.key_path,
                          trusted={self.trusted[node.host]}, connect_timeout=3, retries=1)
        self.connections.append(conn)
        return conn
