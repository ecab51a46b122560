"""What a deploy builds (plain dataclasses) and the context its steps share.

A ClusterPlan is made from the CLI flags and the state store; steps read it and the
facts they gather, and put what other nodes need (public keys, the server's address)
into `DeployContext.shared`.
"""

from __future__ import annotations

import ipaddress
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from core.schema.endpoints import is_ip
from core.bootstrap import versions
from core.bootstrap.progress import ProgressEvent
from core.bootstrap.session import CommandLog, NodeSession
from core.errors import InvalidInput
from core.nodes import facts as node_facts
from core.nodes.blockers import WIREGUARD_INTERFACE as DEFAULT_INTERFACE
from core.nodes.blockers import WIREGUARD_PORT

DEFAULT_SUBNET = "10.99.0.0/24"
DEFAULT_MTU = 1380
VXLAN_OVERHEAD = 50


@dataclass
class NodeSpec:
    """A member of the cluster: how to reach it and where it sits in the mesh."""

    name: str
    host: str
    role: str = "agent"  # "server" (first node) or "agent"
    mesh_ip: str | None = None
    endpoint: str | None = None  # public host[:port] for WireGuard peers (NAT override)
    external_ip: str | None = None  # public address k3s advertises for a NAT'd node
    datacenter: str | None = None  # the node's zone label (core.domain.datacenters)


@dataclass
class K3sOptions:
    version: str = versions.K3S_VERSION
    bundle: str | None = None  # air-gap: k3s[-arm64], k3s-airgap-images-<arch>.tar, containerd
    sha256: dict[str, str] = field(default_factory=dict)  # file name -> the user's --sha256
    insecure_skip_checksum: bool = False  # install files no known hash vouches for
    bin_dir: str = "/usr/local/bin"
    config_dir: str = "/etc/rancher/k3s"
    api_timeout: float = 300.0
    ready_timeout: float = 600.0


@dataclass
class VolcanoOptions:
    version: str = versions.volcano_for(versions.K3S_VERSION)  # paired by Volcano's table
    manifest: str | None = None  # a local copy of volcano-development.yaml
    queue: str = "geotrain"
    timeout: float = 300.0


@dataclass
class ClusterPlan:
    name: str
    nodes: list[NodeSpec]
    vpn: bool = True
    subnet: str = DEFAULT_SUBNET
    interface: str = DEFAULT_INTERFACE
    listen_port: int = WIREGUARD_PORT
    mtu: int = DEFAULT_MTU
    min_disk_gb: float = 5.0
    k3s: K3sOptions = field(default_factory=K3sOptions)
    volcano: VolcanoOptions = field(default_factory=VolcanoOptions)
    mesh_timeout: float = 30.0
    netmatrix_bytes: int = 4 << 20
    prepull: bool = False  # the optional `images` step: pull the workspace image on every node
    image: str | None = None  # the cluster's own workspace image (None: upstream, core.domain.images)
    registry_mirrors: dict[str, str] = field(default_factory=dict)  # registry -> mirror URL (registry_mirrors.py)

    @property
    def server(self) -> NodeSpec:
        return self.nodes[0]

    def prefix_len(self) -> int:
        return ipaddress.ip_network(self.subnet).prefixlen

    def address(self, spec: NodeSpec) -> str:
        """The address Kubernetes and peers use for a node: mesh IP, or its host."""
        return spec.mesh_ip if self.vpn and spec.mesh_ip else spec.host


def parse_subnet(text: str) -> ipaddress.IPv4Network:
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise InvalidInput(f"--subnet {text!r} is not a network in CIDR form ({exc})",
                           "use e.g. --subnet 10.99.0.0/24") from None
    if net.version != 4 or net.num_addresses < 4:
        raise InvalidInput(f"--subnet {text} is too small or not IPv4",
                           "use an IPv4 network of at least /30, e.g. 10.99.0.0/24")
    return net


def assign_mesh_ips(subnet: str, nodes: list[NodeSpec]) -> None:
    """Give each node without a mesh IP the next free host address, keeping the rest."""
    net = parse_subnet(subnet)
    taken = {n.mesh_ip for n in nodes if n.mesh_ip}
    free = (str(ip) for ip in net.hosts() if str(ip) not in taken)
    for spec in nodes:
        if not spec.mesh_ip:
            try:
                spec.mesh_ip = next(free)
            except StopIteration:
                raise InvalidInput(f"subnet {subnet} has no free address for {spec.name}",
                                   "choose a larger --subnet") from None
        elif not is_ip(spec.mesh_ip) or ipaddress.ip_address(spec.mesh_ip) not in net:
            raise InvalidInput(f"{spec.name} has mesh address {spec.mesh_ip!r}, outside {subnet}",
                               "keep the cluster's subnet, or delete and redeploy the cluster")


FACTS_KEY = "node-facts"  # the probed result of the fact script
# A dry run asks nothing: it assumes a Debian-like systemd node where we are root.
DRY_RUN_OUTPUT = "".join(f"{node_facts.MARKER}{name}\n{text}\n" for name, text in {
    "system": "Linux - x86_64\nID=debian", "init": "systemd", "sudo": "uid=0(root)\nroot"}.items())


@dataclass
class NodeTarget:
    """One node during a deploy: its spec, its session, and facts gathered so far.

    `facts` holds the node's fact families (core.nodes.facts, as the node pool stores
    them) and what steps note for later steps of the same deploy.
    """

    spec: NodeSpec
    session: NodeSession
    facts: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)  # persisted in cluster_nodes.state
    probed: dict[str, Any] = field(default_factory=dict)  # fact results of the first round trip
    gathered: bool = False  # the fact script ran in this deploy

    @property
    def name(self) -> str:
        return self.spec.name

    def fact(self, key: str, command: str, **kwargs: Any) -> Any:
        """The probed result for `key` (used once: later reads ask the node again)."""
        result = self.probed.pop(key, None)
        return result if result is not None else self.session.fact(command, **kwargs)

    def gather_facts(self) -> dict[str, Any]:
        """The node pool's fact script and parsers, run once per node per deploy.

        A dry run keeps what it was seeded with (the GPUs the pool knows) and assumes the rest.
        """
        if self.session.dry_run:
            for key, value in node_facts.parse_all(DRY_RUN_OUTPUT).items():
                have = self.facts.setdefault(key, value)
                if isinstance(have, dict) and isinstance(value, dict):  # complete a partial seed
                    for sub, assumed in value.items():
                        have.setdefault(sub, assumed)
            if not self.facts.get("addresses"):  # assume the node owns the address it is reached at
                self.facts["addresses"] = [self.spec.host]
        elif not self.gathered:
            result = self.fact(FACTS_KEY, node_facts.script(()), sudo=False)
            self.facts.update(node_facts.parse_all(result.stdout))
            self.gathered = True
        return self.facts

    def ensure_file(self, path: str, content: str, mode: int = 0o644,
                    secret: bool = False) -> bool:
        """session.ensure_file, using the probed `file:PATH` fact when there is one."""
        return self.session.ensure_file(path, content, mode, secret,
                                        current=self.probed.pop(f"file:{path}", None))


@dataclass
class DeployContext:
    plan: ClusterPlan
    targets: dict[str, NodeTarget]
    command_log: CommandLog
    secrets: dict[str, str] = field(default_factory=dict)  # name -> value, never logged
    dry_run: bool = False
    on_event: Callable[[ProgressEvent], None] | None = None
    shared: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def emit(self, event: ProgressEvent) -> None:
        if self.on_event:
            self.on_event(event)

    def put_shared(self, key: str, value: Any) -> None:
        with self.lock:
            self.shared[key] = value
