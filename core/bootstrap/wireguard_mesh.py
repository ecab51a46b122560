"""WireGuard full mesh: a key pair made on each node, one /32 peer per other node.

The private key is generated on the node into a 0600 file and handed to `wg set` by
path: it never crosses SSH, and nothing reads the interface's private key back
(`wg show dump` is cut to its peer lines on the node). Kernel WireGuard where the
module exists, wireguard-go otherwise. Verified by a ping over the mesh to every peer
(which needs the handshake) before the next step.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import shlex
from dataclasses import dataclass

from core.bootstrap import packages, paths_on_node, wireguard_boot
from core.bootstrap.plan import DeployContext, NodeTarget
from core.bootstrap.runner import Phase, Step
from core.bootstrap.session import StepFailed, file_state
from core.schema.endpoints import WG_KEY_RE, check_wg_key, host_port, parse_host_port
from core.errors import InvalidInput

KEY_DIR = "/etc/wireguard"
KEY_PATH = f"{KEY_DIR}/geotrain.key"
KEEPALIVE = 25
# A handshake this recent proves the peer answered (keepalives renew it every ~2 min).
HANDSHAKE_FRESH = 180
READ_PUBLIC = f"test -s {KEY_PATH} && wg pubkey < {KEY_PATH}"



def dry_run_key(node: str) -> str:
    """A well-formed stand-in for the key a dry run never generates (one per node)."""
    return base64.b64encode(hashlib.sha256(f"dry run {node}".encode()).digest()).decode()


@dataclass
class Peer:
    public_key: str
    endpoint: str
    allowed_ips: str
    handshake: int = 0
    keepalive: int = 0


@dataclass
class InterfaceState:
    exists: bool = False
    up: bool = False
    mtu: int = 0
    addresses: tuple[str, ...] = ()
    public_key: str = ""
    listen_port: int = 0
    peers: dict[str, Peer] | None = None
    now: int = 0  # the node's clock, to age handshakes


def interface_command(interface: str) -> str:
    i = shlex.quote(interface)
    return (f"echo @link; ip -o link show dev {i} 2>/dev/null; "
            f"echo @addr; ip -o -4 addr show dev {i} 2>/dev/null | awk '{{print $4}}'; "
            f"echo @pub; wg show {i} public-key 2>/dev/null; "
            f"echo @port; wg show {i} listen-port 2>/dev/null; "
            f"echo @peers; wg show {i} dump 2>/dev/null | tail -n +2; echo @now; date +%s")


def parse_interface(output: str) -> InterfaceState:
    sections: dict[str, list[str]] = {}
    current = None
    for line in output.splitlines():
        if line.startswith("@"):
            current = sections.setdefault(line[1:].strip(), [])
        elif current is not None and line.strip():
            current.append(line.strip())
    state = InterfaceState(peers={})
    link = " ".join(sections.get("link", []))
    if link:
        state.exists = True
        flags = link.split("<", 1)[-1].split(">", 1)[0].split(",")
        state.up = "UP" in flags
        words = link.split()
        if "mtu" in words:
            state.mtu = int(words[words.index("mtu") + 1])
    state.addresses = tuple(sections.get("addr", []))
    state.public_key = (sections.get("pub") or [""])[0]
    port = (sections.get("port") or ["0"])[0]
    state.listen_port = int(port) if port.isdigit() else 0
    now = (sections.get("now") or ["0"])[0]
    state.now = int(now) if now.isdigit() else 0
    for line in sections.get("peers", []):
        cols = line.split("\t")
        if len(cols) >= 8 and WG_KEY_RE.fullmatch(cols[0]):  # anything else is not a peer
            keepalive = int(cols[7]) if cols[7].isdigit() else 0
            state.peers[cols[0]] = Peer(cols[0], cols[2], cols[3], int(cols[4] or 0), keepalive)
    return state


def _tools(ctx: DeployContext, target: NodeTarget) -> str:
    kernel = target.gather_facts()["wireguard"]["kernel_module"]
    wanted = {"wg": "wireguard-tools"}
    if not kernel:
        wanted["wireguard-go"] = "wireguard-go"
    installed = packages.ensure_commands(target, wanted, "wg:missing")
    mode = "kernel module" if kernel else "wireguard-go"
    return f"installed {', '.join(installed)}" if installed else f"tools present ({mode})"


def _keys(ctx: DeployContext, target: NodeTarget) -> str:
    session = target.session
    public = target.fact("wg:pub", READ_PUBLIC).stdout.strip()
    made = False
    if not public:  # the private key goes to a 0600 file; only the public key comes back
        result = session.change(f"umask 077 && mkdir -p {KEY_DIR} {paths_on_node.RUN_DIR}"
                                f" && wg genkey > {KEY_PATH}.new"
                                f" && mv {KEY_PATH}.new {KEY_PATH} && wg pubkey < {KEY_PATH}",
                                what="generating the WireGuard key")
        public = result.stdout.strip() or (dry_run_key(target.name) if ctx.dry_run else "")
        session.dirs_made.add(paths_on_node.RUN_DIR)
        made = True
    if not ctx.dry_run:
        public = _peer_key(public, target.name)
    target.state["wg_public_key"] = public
    with ctx.lock:
        ctx.shared.setdefault("wg_keys", {})[target.name] = public
    return "key pair generated on the node" if made else "key pair present"


def desired_peers(ctx: DeployContext, target: NodeTarget) -> dict[str, Peer]:
    """One peer per other member with a known public key (this run's, or stored)."""
    plan, keys = ctx.plan, ctx.shared.get("wg_keys", {})
    peers = {}
    for spec in plan.nodes:
        other = ctx.targets.get(spec.name)
        key = keys.get(spec.name) or (other.state.get("wg_public_key") if other else None)
        if spec.name == target.name or not key:
            continue
        key = _peer_key(key, spec.name)
        try:
            host, port = parse_host_port(spec.endpoint or spec.host, plan.listen_port,
                                         f"endpoint of {spec.name}")
            mesh_ip = str(ipaddress.ip_address(spec.mesh_ip))
        except (InvalidInput, ValueError) as exc:
            raise StepFailed(getattr(exc, "message", str(exc))) from None
        peers[key] = Peer(key, host_port(host, port), f"{mesh_ip}/32", keepalive=KEEPALIVE)
    return peers


def _peer_key(key: str, node: str) -> str:
    """A peer's public key as read back from its node: refused unless a real key."""
    try:
        return check_wg_key(key, f"the WireGuard public key of {node}")
    except InvalidInput as exc:
        raise StepFailed(exc.message) from None


def peer_changes(have: dict[str, Peer], want: dict[str, Peer]) -> tuple[list[str], list[str]]:
    """`wg set` arguments for peers to add, update or remove (empty when all match), and
    the new peers whose keepalive is to be turned on after the mesh is verified.

    A new peer starts without keepalive: a keepalive is sent at once, and a handshake
    that reaches a node not yet knowing us is retried only after 5 s. A peer whose
    endpoint roamed (NAT) but has a handshake is left alone.
    """
    args, pending = [], []
    for key, peer in want.items():
        old = have.get(key)
        if old and old.allowed_ips == peer.allowed_ips and old.keepalive == peer.keepalive \
                and (old.endpoint == peer.endpoint or old.handshake):
            continue
        keepalive = peer.keepalive if old else 0
        if not old:
            pending.append(key)
        args += ["peer", key, "endpoint", peer.endpoint, "allowed-ips", peer.allowed_ips,
                 "persistent-keepalive", str(keepalive)]
    for key in have:
        if key not in want:
            args += ["peer", key, "remove"]
    return args, pending


def _interface(ctx: DeployContext, target: NodeTarget) -> str:
    plan, session = ctx.plan, target.session
    iface = shlex.quote(plan.interface)
    state = parse_interface(target.fact("wg:iface", interface_command(iface)).stdout)
    todo: list[tuple[str, str]] = []
    if not state.exists:
        if target.facts.get("wireguard", {}).get("kernel_module"):
            todo.append((f"ip link add dev {iface} type wireguard", "creating the interface"))
        else:
            todo.append((f"wireguard-go {iface}", "starting wireguard-go"))
    if state.public_key != target.state.get("wg_public_key") \
            or state.listen_port != plan.listen_port:
        todo.append((f"wg set {iface} private-key {KEY_PATH} listen-port {plan.listen_port}",
                     "setting the key and port"))
    address = f"{target.spec.mesh_ip}/{plan.prefix_len()}"
    if state.addresses != (address,):
        todo.append((f"ip -4 addr flush dev {iface} && ip addr add {shlex.quote(address)}"
                     f" dev {iface}",
                     f"setting the mesh address {address}"))
    if not state.up or state.mtu != plan.mtu:
        todo.append((f"ip link set dev {iface} mtu {plan.mtu} up", f"bringing {iface} up"))
    want = desired_peers(ctx, target)
    args, pending = peer_changes(state.peers or {}, want)
    target.facts["wg_keepalive_pending"] = pending
    if args:
        todo.append((f"wg set {iface} " + " ".join(shlex.quote(a) for a in args),
                     f"{args.count('peer')} peer change(s)"))
    target.facts["wg_fresh_handshakes"] = {
        key for key, peer in (state.peers or {}).items()
        if peer.handshake and state.now - peer.handshake < HANDSHAKE_FRESH}
    if todo:
        session.change_all(todo)
    target.facts["wg_changed"] = bool(todo)
    done = [what for _, what in todo]
    if wireguard_boot.ensure_boot(ctx, target, list(want.values()), KEY_PATH):
        done.append("boot config written")
    return ", ".join(done) if done else "mesh interface up to date"


def _verify(ctx: DeployContext, target: NodeTarget) -> str:
    """Ping every other live member over the mesh (pings start the handshakes).

    On a re-run that changed nothing, fresh handshakes with every live peer suffice.
    """
    others = [t.spec.mesh_ip for t in ctx.shared["wg_live"] if t.name != target.name]
    if not others:
        return "no peers to verify"
    fresh = target.facts.get("wg_fresh_handshakes", set())
    live_keys = {ctx.shared.get("wg_keys", {}).get(t.name) for t in ctx.shared["wg_live"]
                 if t.name != target.name}
    if not target.facts.get("wg_changed") and live_keys <= fresh:  # a no-op re-run
        return f"{len(others)} peer(s) answered within {HANDSHAKE_FRESH}s (keepalive {KEEPALIVE}s)"
    probe = paths_on_node.ensure_netprobe(target)
    ping = f"{probe} ping --timeout {ctx.plan.mesh_timeout:g} {' '.join(map(shlex.quote, others))}"
    pending = target.facts.get("wg_keepalive_pending") or []
    timeout = ctx.plan.mesh_timeout + 30
    if pending:  # first contact: keepalives go on once the pings got through, same round trip
        args = " ".join(f"peer {shlex.quote(key)} persistent-keepalive {KEEPALIVE}"
                        for key in pending)
        iface = shlex.quote(ctx.plan.interface)
        result = target.session.change(f"{ping} && wg set {iface} {args}",
                                       timeout=timeout, check=False)
    else:
        result = target.session.fact(ping, timeout=timeout)
    if ctx.dry_run:
        return "verify skipped (dry run)"
    answers = [line.split() for line in result.stdout.splitlines()]
    failed = [words[1] for words in answers if words[:1] == ["fail"]]
    if failed:
        names = [t.name for t in ctx.shared["wg_live"] if t.spec.mesh_ip in failed]
        raise StepFailed(f"no answer over the mesh from {', '.join(names)} within "
                         f"{ctx.plan.mesh_timeout:g}s (check UDP {ctx.plan.listen_port} is open"
                         " between the nodes, or set an endpoint for NAT)")
    if not result.ok:
        lines = result.stderr.strip().splitlines() or [f"exit code {result.exit_code}"]
        raise StepFailed(f"checking the mesh failed: {lines[-1]}")
    return f"pinged {len(others)} peer(s) over the mesh"


def _live(ctx: DeployContext, alive: list[NodeTarget]) -> list[NodeTarget]:
    ctx.put_shared("wg_live", list(alive))
    return alive


def _probe(ctx: DeployContext, target: NodeTarget) -> dict[str, str]:
    return {"wg:missing": packages.missing_probe(["wg", "wireguard-go"]), "wg:pub": READ_PUBLIC,
            "wg:iface": interface_command(ctx.plan.interface),
            f"file:{paths_on_node.NETPROBE}": file_state(paths_on_node.NETPROBE),
            **wireguard_boot.probe(ctx)}


STEP = Step("wireguard", [Phase("tools", _tools), Phase("keys", _keys),
                          Phase("interface", _interface), Phase("verify", _verify, _live)],
            probe=_probe)
