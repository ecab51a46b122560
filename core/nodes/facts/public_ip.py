"""The node's public address as the internet sees it (behind NAT it differs from its own).

Runs in the background while the other facts are gathered; each URL answers with the
caller's address in plain text.
"""

from __future__ import annotations

import ipaddress
import shlex

DEFAULT_URLS = ("https://api.ipify.org", "https://ifconfig.me/ip", "https://icanhazip.com")


def command(urls: tuple[str, ...] = DEFAULT_URLS, timeout_s: int = 3) -> str:
    quoted = " ".join(shlex.quote(u) for u in urls)
    return (f"for u in {quoted}; do "
            f"if command -v curl >/dev/null 2>&1; then curl -fsS -m {timeout_s} \"$u\" && break; "
            f"elif command -v wget >/dev/null 2>&1; then wget -qO- -T {timeout_s} \"$u\" && break; "
            "fi; done")


def parse(output: str) -> str | None:
    for token in output.split():
        try:
            return str(ipaddress.ip_address(token.strip()))
        except ValueError:
            continue
    return None
