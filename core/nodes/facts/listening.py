"""Sockets listening on the node: (protocol, port, process) from `ss`, else /proc/net.

`ss -p` names the process only for sockets the caller may see (all of them as root);
a socket with no process is the kernel's (a WireGuard interface, flannel's VXLAN) or
another user's. Without `ss`, /proc/net/{tcp,udp}{,6} give ports without processes.
"""

from __future__ import annotations

COMMAND = ("if command -v ss >/dev/null 2>&1; then ss -Hlntup; "
           "else cat /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6; fi")
_TCP_LISTEN = "0A"  # include/net/tcp_states.h: TCP_LISTEN = 10


def parse(output: str) -> list[tuple[str, int, str]]:
    found: list[tuple[str, int, str]] = []
    proc_proto = None
    for line in output.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "sl":  # a /proc/net header: udp's ends in "drops", tcp's does not
            proc_proto = "udp" if parts[-1] == "drops" else "tcp"
        elif parts[0].endswith(":") and len(parts) > 3:
            found += _proc_line(parts, proc_proto or "udp")
        elif parts[0] in ("tcp", "udp") and len(parts) > 4:
            found += _ss_line(parts)
    return sorted(set(found))


def _ss_line(parts: list[str]) -> list[tuple[str, int, str]]:
    """`udp UNCONN 0 0 0.0.0.0:51820 0.0.0.0:* users:(("nc",pid=77,fd=3))`."""
    port = parts[4].rsplit(":", 1)[-1]
    owner = " ".join(parts[6:])
    process = owner.split('"')[1] if owner.count('"') >= 2 else ""
    return [(parts[0], int(port), process)] if port.isdigit() else []


def _proc_line(parts: list[str], proto: str) -> list[tuple[str, int, str]]:
    """`  0: 00000000:CA6C 00000000:0000 07 …`: the port in hex, the state after rem_address."""
    if proto == "tcp" and parts[3] != _TCP_LISTEN:
        return []
    port = parts[1].rsplit(":", 1)[-1]
    try:
        return [(proto, int(port, 16), "")]
    except ValueError:
        return []


def holders(listening: list, proto: str, port: int) -> list[str]:
    """The processes ("" when unseen) holding `proto` `port`."""
    return [process for have_proto, have_port, process in listening
            if have_proto == proto and have_port == port]
