"""Terminal questions for the headless commands: host keys and key passphrases.

Without a terminal nothing is asked (scripts pass --trust-host-key or use the agent),
so a command never hangs waiting for input nobody will type.
"""

from __future__ import annotations

import getpass
import sys

from core.errors import InvalidInput


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stderr.isatty()


def confirm_host_key(label: str, key_type: str, fingerprint: str) -> bool:
    if not _interactive():
        return False
    print(f"The authenticity of host {label} can't be established.\n"
          f"{key_type} key fingerprint is {fingerprint}.", file=sys.stderr)
    answer = input("Trust this key and pin it in geotrain's known_hosts? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def confirm_delete(yes: bool) -> bool:
    """--yes, or 'y' typed at a terminal; without either a script gets a one-line refusal."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise InvalidInput("refusing to delete without confirmation", "pass --yes")
    return input("Delete? [y/N] ").strip().lower() == "y"


def ask_passphrase(key_path: str) -> str | None:
    if not _interactive():
        return None
    return getpass.getpass(f"Passphrase for SSH key {key_path}: ") or None
