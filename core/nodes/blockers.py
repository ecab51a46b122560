"""One blocker policy: rules over a node's facts -> one-line blockers, each saying what to do.

Node status (import, refresh) and the cluster wizard's preflight judge the same rules over
the same facts (core.nodes.facts). A rule is a function (facts, Context) -> list of
blockers; RULES is the list both walk, so a new rule (say a version floor) is one
function appended there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from core.domain.architectures import RELEASE_ARCH, node_arch  # noqa: F401 (the wizard downloads by RELEASE_ARCH)
from core.domain.image_sizes import default_image_disk
from core.domain.images import vendor_of_facts
from core.nodes.facts import listening

WIREGUARD_PORT = 51820
WIREGUARD_INTERFACE = "wg-geotrain"
# Daemons that may already hold our ports on a node geotrain has set up before.
OWN_PROCESSES = frozenset({"wireguard-go", "k3s", "k3s-server", "k3s-agent", "containerd"})


def needed_ports(role: str = "agent", vpn: bool = True,
                 wg_port: int = WIREGUARD_PORT) -> tuple[tuple[str, int, str], ...]:
    """(protocol, port, what needs it) a cluster member must be able to listen on."""
    ports = [("tcp", 10250, "kubelet"), ("udp", 8472, "flannel VXLAN")]
    if role == "server":
        ports.append(("tcp", 6443, "Kubernetes API"))
    if vpn:
        ports.append(("udp", wg_port, "WireGuard"))
    return tuple(ports)


@dataclass(frozen=True)
class Context:
    """What the rules know besides the facts: what the node is asked to become.

    The defaults judge a pool node for any future cluster (an agent with WireGuard).
    """

    ours: bool = False  # already in a geotrain cluster: its k3s is geotrain's own
    ports: tuple[tuple[str, int, str], ...] = field(default_factory=needed_ports)
    wg_port: int = WIREGUARD_PORT
    wg_interface: str = WIREGUARD_INTERFACE
    min_disk_gb: float = 5.0
    k3s_version: str | None = None  # what the wizard installs (None: not known yet)
    default_images: bool = False  # the cluster runs the default images: room for its node's (image_sizes)


Rule = Callable[[dict, Context], list[str]]


def linux(facts: dict, ctx: Context) -> list[str]:
    system = facts.get("system", {}).get("system")
    return [] if system == "Linux" else [f"not Linux ({system or 'unknown'}): use a Linux server"]


def architecture(facts: dict, ctx: Context) -> list[str]:
    arch = facts.get("system", {}).get("arch", "")
    if arch and arch not in RELEASE_ARCH:
        return [f"unsupported architecture {arch}: geotrain needs x86_64 or aarch64"]
    return []


def root_or_sudo(facts: dict, ctx: Context) -> list[str]:
    sudo = facts.get("sudo", {})
    if sudo.get("passwordless", False):
        return []
    why = "has no sudo" if sudo.get("sudo") == "no-sudo" else "needs a password for sudo"
    return [f"user {sudo.get('user') or '?'} {why}: allow passwordless sudo "
            "(`USER ALL=(ALL) NOPASSWD:ALL`) or import as root"]


def docker_engine(facts: dict, ctx: Context) -> list[str]:
    docker = facts.get("docker", {})
    if not docker.get("engine"):
        return []
    return ["a Docker engine is installed (" + "; ".join(docker.get("evidence", [])) +
            "): geotrain runs its own containerd — remove docker-ce/docker.io or use "
            "another server (a docker CLI alone is fine)"]


def kubernetes_installed(facts: dict, ctx: Context) -> list[str]:
    k3s = facts.get("k3s", {})
    if ctx.ours or not (k3s.get("installed") or k3s.get("other_kubelet")):
        return []
    return ["Kubernetes is already installed (k3s or a kubelet): uninstall it "
            "(e.g. /usr/local/bin/k3s-uninstall.sh) or use another server"]


def disk_space(facts: dict, ctx: Context) -> list[str]:
    """The base floor; on a cluster of default images, that plus the node's own image
    (core.domain.image_sizes: the AMD image takes several times the NVIDIA one)."""
    free_gb = facts.get("disk", {}).get("var_lib_free_gb", 0.0)
    image = default_image_disk(vendor_of_facts(facts), node_arch(facts)) if ctx.default_images else None
    need = ctx.min_disk_gb + (image[1] if image else 0.0)
    if free_gb >= need:
        return []
    why = f" with about {image[1]:g} for {image[0]}" if image else ""
    todo = ": free some space, or give the cluster an image of your own (--image)" if image else ": free some space"
    return [f"only {free_gb:.1f} GB free under /var/lib (need {need:g}{why}){todo}"]


def ports_taken(facts: dict, ctx: Context) -> list[str]:
    """A needed port someone else holds. A socket with no process is the kernel's (our
    WireGuard interface, flannel's VXLAN) or another user's: only the WireGuard port,
    without our interface up, is then taken."""
    own_wg = ctx.wg_interface in facts.get("wireguard", {}).get("interfaces", [])
    found = []
    for proto, port, what in ctx.ports:
        for process in listening.holders(facts.get("listening", []), proto, port):
            if process in OWN_PROCESSES or (not process and (port != ctx.wg_port or own_wg)):
                continue
            taken = f"is taken by {process}" if process else "is in use"
            found.append(f"{proto} port {port} ({what}) {taken}: free it or pick another node")
    return list(dict.fromkeys(found))  # tcp and tcp6 sockets on one port: one line


RULES: list[Rule] = [linux, architecture, root_or_sudo, docker_engine, kubernetes_installed,
                     disk_space, ports_taken]


def blockers(facts: dict, ctx: Context | None = None) -> list[str]:
    """Each reason the node cannot take part, in the order of RULES."""
    ctx = ctx or Context()
    return [blocker for rule in RULES for blocker in rule(facts, ctx)]
