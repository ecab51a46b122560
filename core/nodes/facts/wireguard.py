"""WireGuard: tools, a kernel module or wireguard-go, and interfaces already up."""

from __future__ import annotations

COMMAND = ("command -v wg >/dev/null 2>&1 && echo tools; "
           "command -v wireguard-go >/dev/null 2>&1 && echo wireguard-go; "
           "[ -d /sys/module/wireguard ] && echo module-loaded; "
           "{ modinfo wireguard >/dev/null 2>&1 || modprobe -n -q wireguard 2>/dev/null; } && echo module-available; "
           "for s in /var/run/wireguard/*.sock; do [ -S \"$s\" ] && echo \"iface $(basename \"$s\" .sock)\"; done; "
           "ip -o link show type wireguard; true")


def parse(output: str) -> dict:
    lines = {ln.strip() for ln in output.splitlines() if ln.strip()}
    return {"tools": "tools" in lines, "wireguard_go": "wireguard-go" in lines,
            "kernel_module": bool(lines & {"module-loaded", "module-available"}),
            "interfaces": sorted({_interface(ln) for ln in lines if _interface(ln)})}


def _interface(line: str) -> str | None:
    """`iface wg0` (a wireguard-go socket) or `7: wg0: <…>` (`ip -o link`)."""
    parts = line.split()
    if parts[0] == "iface" and len(parts) > 1:
        return parts[1]
    if parts[0].rstrip(":").isdigit() and len(parts) > 1:
        return parts[1].rstrip(":").split("@")[0]
    return None
