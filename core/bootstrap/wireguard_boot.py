"""Bringing the mesh back after a reboot: a wg-quick config and its systemd unit.

The running interface is set up directly (wireguard_mesh); where systemd is PID 1 the
same state is also written as /etc/wireguard/IFACE.conf and `wg-quick@IFACE` enabled, so
the mesh (and k3s on top of it) survives a reboot. The private key stays in its own
file: the config only points at it (PostUp), so this file holds no secret.
"""

from __future__ import annotations

import shlex

from core.bootstrap.plan import DeployContext, NodeTarget
from core.bootstrap.session import StepFailed, file_state


def config_path(interface: str) -> str:
    return f"/etc/wireguard/{interface}.conf"


def render_quick_config(ctx: DeployContext, target: NodeTarget, peers: list, key_path: str) -> str:
    plan = ctx.plan
    for value in [plan.name, plan.interface, target.spec.mesh_ip, key_path] + [
            v for p in peers for v in (p.public_key, p.endpoint, p.allowed_ips)]:
        if not str(value).isprintable():  # a newline would start a new (PostUp) line
            raise StepFailed(f"refusing to write {value!r} into the wg-quick config")
    lines = [f"# Written by geotrain for cluster {plan.name}: brings {plan.interface} back at boot.",
             "[Interface]", f"Address = {target.spec.mesh_ip}/{plan.prefix_len()}",
             f"ListenPort = {plan.listen_port}", f"MTU = {plan.mtu}",
             f"PostUp = wg set %i private-key {key_path}"]
    for peer in sorted(peers, key=lambda p: p.allowed_ips):
        lines += ["", "[Peer]", f"PublicKey = {peer.public_key}", f"Endpoint = {peer.endpoint}",
                  f"AllowedIPs = {peer.allowed_ips}", f"PersistentKeepalive = {peer.keepalive}"]
    return "\n".join(lines) + "\n"


def probe(ctx: DeployContext) -> dict[str, str]:
    unit = shlex.quote(f"wg-quick@{ctx.plan.interface}")
    return {"wg:boot": f"systemctl is-enabled {unit} 2>/dev/null",
            f"file:{config_path(ctx.plan.interface)}": file_state(config_path(ctx.plan.interface))}


def ensure_boot(ctx: DeployContext, target: NodeTarget, peers: list, key_path: str) -> bool:
    """Write the config and enable the unit where systemd runs; True if anything changed."""
    if not target.facts.get("init", {}).get("systemd"):
        return False
    iface = ctx.plan.interface
    text = render_quick_config(ctx, target, peers, key_path)
    changed = target.ensure_file(config_path(iface), text, mode=0o600)
    unit = shlex.quote(f"wg-quick@{iface}")
    enabled = target.fact("wg:boot", f"systemctl is-enabled {unit}").stdout.strip()
    if enabled != "enabled":
        target.session.change(f"systemctl enable {unit}",
                              what="enabling the mesh at boot")
        changed = True
    return changed
