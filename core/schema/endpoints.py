"""One validator for every host, endpoint and WireGuard key that enters geotrain.

Hosts end up in remote shells, wg-quick configs and kubeconfig URLs, so each is checked
once where it enters (node import, CLI flags, wizard, deploy plan): an IP address or a
DNS name, matched in full (a `$`-anchored regex accepts a trailing newline). IPv6 is
rendered as `[addr]:port` everywhere a port follows.
"""

from __future__ import annotations

import ipaddress
import re

from core.errors import InvalidInput

# RFC 1123 labels (plus '_', seen in internal names): letters, digits, '-' inside; a name of at most 253 characters.
_LABEL = r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)"
DNS_NAME_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
# A WireGuard key: 32 bytes in base64 (`wg genkey` / `wg pubkey`), 44 characters ending in '='.
WG_KEY_RE = re.compile(r"[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=")
# Linux interface names: at most 15 characters, no '/', no whitespace (we allow a safe subset).
INTERFACE_RE = re.compile(r"[A-Za-z0-9_.-]{1,15}")
USER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")

HOST_HINT = "give an IP address or a DNS name, e.g. 203.0.113.7, 2001:db8::3 or gpu1.example.com"


def _shown(text: object) -> str:
    """The value quoted for a one-line message (newlines and control bytes escaped)."""
    return repr(str(text))[:120]


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def check_host(text: object, what: str = "host") -> str:
    """`text` when it is an IP address or a DNS name; else a one-line InvalidInput."""
    host = text if isinstance(text, str) else ""
    if is_ip(host) and "%" not in host:
        return host
    if len(host) <= 253 and DNS_NAME_RE.fullmatch(host) and not host.replace(".", "").isdigit():
        return host
    raise InvalidInput(f"{what} {_shown(text)} is not an IP address or a DNS name", HOST_HINT)


def check_port(text: object, what: str = "port") -> int:
    value = str(text)
    if not re.fullmatch(r"[0-9]{1,5}", value) or not 0 < int(value) < 65536:
        raise InvalidInput(f"{what} {_shown(text)} is not a port number",
                           "use a number from 1 to 65535")
    return int(value)


def host_port(host: str, port: int) -> str:
    """`host:port`, with IPv6 in brackets (`[2001:db8::3]:51820`)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_host_port(text: object, default_port: int, what: str = "endpoint") -> tuple[str, int]:
    """`host`, `host:port`, `[v6]` or `[v6]:port` (a bare IPv6 address too) -> (host, port)."""
    value = text if isinstance(text, str) else ""
    host, port = value, str(default_port)
    if value.startswith("["):
        host, closed, tail = value[1:].partition("]")
        if not closed or (tail and not tail.startswith(":")):
            host = ""
        port = tail[1:] if tail else port
    elif value.count(":") == 1:
        host, port = value.split(":")
    try:
        return check_host(host, what), check_port(port, f"{what} port")
    except InvalidInput as exc:
        raise InvalidInput(f"{what} {_shown(text)} is not HOST or HOST:PORT ({exc.message})",
                           "write it like 203.0.113.7:51820, [2001:db8::3]:51820 or "
                           "gpu1.example.com") from None


def check_wg_key(text: object, what: str = "WireGuard key") -> str:
    """A base64 WireGuard key (44 characters), as read back from a node."""
    if isinstance(text, str) and WG_KEY_RE.fullmatch(text):
        return text
    raise InvalidInput(f"{what} {_shown(text)} is not a WireGuard key (44 base64 characters)",
                       "regenerate it on the node (`wg genkey`) and deploy again")


def check_interface(text: object) -> str:
    if isinstance(text, str) and INTERFACE_RE.fullmatch(text):
        return text
    raise InvalidInput(f"interface name {_shown(text)} is not valid",
                       "use up to 15 letters, digits, '-', '_' or '.', e.g. wg-geotrain")


def check_user(text: object, what: str = "username") -> str:
    if isinstance(text, str) and USER_RE.fullmatch(text):
        return text
    raise InvalidInput(f"{what} {_shown(text)} is not a valid login name",
                       "use letters, digits, '_', '.' or '-', starting with a letter, e.g. ubuntu")


def parse_endpoint(text: str, default_user: str | None = None) -> tuple[str | None, str, int]:
    """`[user@]host[:port]` (IPv6 as `[addr]:port`) -> (user, host, port), each validated."""
    user, _, rest = str(text).rpartition("@")
    user = user or default_user
    try:
        host, port = parse_host_port(rest, 22)
        if user is not None:
            check_user(user)
    except InvalidInput as exc:
        raise InvalidInput(f"endpoint {text!r} is not [USER@]HOST[:PORT]: {exc.message}",
                           "write it like 203.0.113.7, ubuntu@gpu1.example.com:2222 or "
                           "[2001:db8::3]:22") from None
    return user, host, port
