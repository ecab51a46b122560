"""Test hosts as pool nodes: records in the store and SSH shells that trust their keys.

Builds on tests.testhosts (netns + real sshd per host). The wizard's suites use the
`gtw` prefix and 10.202.0.0/24 (mesh 10.203.0.0/24) so they can run beside the node
pool's suites.
"""

from __future__ import annotations

import subprocess

from core.domain.records import Node
from core.state.node_records import add_nodes
from core.nodes.ssh import Connection
from core.state.store import Store
from tests import testhosts
from tests.testhosts import TestHost

PREFIX = "gtw"
SUBNET = "10.202.0.0/24"
MESH_SUBNET = "10.203.0.0/24"


def create(n: int) -> list[TestHost]:
    return testhosts.create_hosts(n, PREFIX, SUBNET)


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


class CutConnection:
    """A connection whose host drops off the network when a matching command comes up.

    The bridge-side veth goes down and the connection is closed, so the command and any
    reconnect fail as on a real network cut; `restore()` brings the link back (sshd and
    the host's state survive, as on a real server after a network outage).
    """

    def __init__(self, conn: Connection, host: TestHost, trigger: str) -> None:
        self.conn, self.host, self.trigger = conn, host, trigger
        self.cut = False

    def run(self, command: str, **kwargs):
        if not self.cut and self.trigger in command:
            self.cut = True
            subprocess.run(["ip", "link", "set", self.host.veth, "down"], check=True)
            self.conn.close()
        return self.conn.run(command, **kwargs)

    def put(self, *args, **kwargs):
        return self.conn.put(*args, **kwargs)

    def close(self) -> None:
        self.conn.close()

    def restore(self) -> None:
        subprocess.run(["ip", "link", "set", self.host.veth, "up"], check=True)


class CuttingShellFactory(ShellFactory):
    """Like ShellFactory, but host `victim` is cut off at the first command with `trigger`."""

    def __init__(self, hosts: list[TestHost], victim: TestHost, trigger: str) -> None:
        super().__init__(hosts)
        self.victim, self.trigger = victim, trigger
        self.cuts: list[CutConnection] = []

    def __call__(self, node: Node):
        conn = super().__call__(node)
        if node.host != self.victim.ip:
            return conn
        cut = CutConnection(conn, self.victim, self.trigger)
        self.cuts.append(cut)
        return cut


def mesh_ping(host: TestHost, addresses: list[str]) -> str:
    """Ping `addresses` from inside `host` (real ICMP through its mesh interface)."""
    done = host.run(f"/usr/bin/python3 /run/geotrain/netprobe.py ping --timeout 10 "
                    f"{' '.join(addresses)}", check=False)
    return done.stdout


def peers_of(host: TestHost, interface: str = "wg-geotrain") -> list[str]:
    return host.run(f"wg show {interface} peers").stdout.split()
