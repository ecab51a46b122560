"""What callers of core/nodes/ssh.py name without loading paramiko: the prompt callbacks'
types and the errors. The app and the CLI import these at start; paramiko loads with the
first connection (core/nodes/ssh.py re-exports all of them)."""

from __future__ import annotations

from typing import Callable

from core.errors import GeotrainError

# (host label, key type, fingerprint) -> trust it?
ConfirmHostKey = Callable[[str, str, str], bool]
# key path -> passphrase, or None when none can be given
AskPassphrase = Callable[[str], "str | None"]


class SSHError(GeotrainError):
    """Any failure talking to a server; the message names the server."""


class Unreachable(SSHError):
    pass


class AuthFailed(SSHError):
    pass


class HostKeyError(SSHError):
    pass


class CommandTimeout(SSHError):
    pass
