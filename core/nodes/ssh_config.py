"""Reading a Host entry of ~/.ssh/config, every value checked.

geotrain's own small reader, not paramiko's: paramiko runs `Match exec` commands (through
invoke) and raises KeyError on any `Match` block. Only what an import needs is read (HostName,
User, Port, IdentityFile, ProxyJump, by OpenSSH's rules: the first value obtained wins,
IdentityFile adds up). A `Match` block is taken as one that does not apply, so no command in
the file ever runs; `Include` is not followed.
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from core.schema.endpoints import check_host, check_port
from core.schema.user_files import read_user_file
from core.errors import InvalidInput

KEYS = ("hostname", "user", "port", "identityfile", "proxyjump")
_LINE = re.compile(r"([A-Za-z][A-Za-z0-9]*)(?:\s*=\s*|\s+)(.*)", re.S)
HINT = "give --ssh-config PATH"


@dataclass
class _Block:
    """A `Host` block (its patterns), or a `Match` block (patterns None: it never applies)."""

    patterns: list[str] | None
    options: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class SSHConfigFile:
    blocks: list[_Block]
    match_blocks: int = 0

    def hosts(self) -> set[str]:
        return {p for b in self.blocks if b.patterns for p in b.patterns}

    def lookup(self, alias: str) -> dict[str, list[str]]:
        """The values of KEYS for `alias`, from the blocks that apply, in file order."""
        found: dict[str, list[str]] = {}
        for block in self.blocks:
            if block.patterns is None or not _applies(block.patterns, alias):
                continue
            for key, values in block.options.items():
                if key == "identityfile":
                    found.setdefault(key, []).extend(v for v in values if v not in found.get(key, []))
                else:
                    found.setdefault(key, values[:1])
        return found


def _words(text: str, number: int) -> list[str]:
    """A Host line's patterns, split as OpenSSH does (quotes group words)."""
    try:
        return shlex.split(text)
    except ValueError:
        raise ValueError(f"line {number} has an unclosed quote") from None


def parse_ssh_config(text: str) -> SSHConfigFile:
    """The blocks of an ssh_config; a line that is not `Keyword value` is a ValueError."""
    config = SSHConfigFile([_Block(["*"])])  # lines before the first Host apply to every host
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parsed = _LINE.fullmatch(line)
        if not parsed:
            raise ValueError(f"line {number} is not `Keyword value`")
        key, rest = parsed.group(1).lower(), parsed.group(2)
        if key == "match":
            config.blocks.append(_Block(None))
            config.match_blocks += 1
        elif key == "host":
            config.blocks.append(_Block(_words(rest, number)))
        elif key in KEYS:  # the value as written, quotes around it removed; checked by the caller
            value = rest[1:-1] if len(rest) > 1 and rest[0] == rest[-1] == '"' else rest
            config.blocks[-1].options.setdefault(key, []).append(value)
    return config


def _applies(patterns: list[str], alias: str) -> bool:
    """OpenSSH's Host matching: any pattern matches and no negated (`!`) one does."""
    hit = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        glob = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lstrip("!"))
        if re.fullmatch(glob, alias, re.S):
            if negated:
                return False
            hit = True
    return hit


def _expand(value: str, tokens: dict[str, str]) -> str:
    """OpenSSH's %-tokens that a key allows (others are left as written)."""
    return re.sub(r"%(.)", lambda m: tokens.get(m.group(1), m.group(0)), value)


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name in the environment nor in /etc/passwd
        return ""


def ssh_config_host(alias: str, config_path: str | None = None, notes: list[str] | None = None) -> dict:
    """What `~/.ssh/config` says about Host `alias`: hostname, port, user, key, jump. `notes`
    hears one line when the file has `Match` blocks (not evaluated, so not used)."""
    path = Path(config_path or "~/.ssh/config").expanduser()
    if not path.is_file():
        raise InvalidInput(f"SSH config {path} does not exist", HINT)
    text = read_user_file(path, "SSH config", HINT)
    try:
        config = parse_ssh_config(text)
    except ValueError as exc:
        raise InvalidInput(f"cannot read SSH config {path}: {str(exc)[:200]}", HINT) from None
    if config.match_blocks and notes is not None:
        notes.append(f"{path}: {config.match_blocks} `Match` block(s) not evaluated (geotrain runs no "
                     "command from the file); their settings are not used")
    if alias not in config.hosts():
        raise InvalidInput(f"{path}: no `Host {alias}` entry",
                           "use an alias defined there (see `grep -i '^host ' ~/.ssh/config`)")
    entry = {key: values if key == "identityfile" else values[0] for key, values in config.lookup(alias).items()}
    where = f"{path} Host {alias}"
    try:
        port = check_port(entry.get("port", 22), "Port")
        hostname = check_host(_expand(entry.get("hostname", alias), {"h": alias, "%": "%"}), "HostName")
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc.message}", f"fix it in {path}: {exc.hint}") from None
    user, local = entry.get("user"), _local_user()
    tokens = {"h": hostname, "p": str(port), "r": user or local, "%": "%"}
    keys = [os.path.expanduser(_expand(k, {**tokens, "d": os.path.expanduser("~"), "u": local}))
            for k in entry.get("identityfile", [])]
    jump = entry.get("proxyjump")
    return {"hostname": hostname, "port": port, "user": user, "key_path": keys[0] if keys else None,
            "jump": _expand(jump, tokens) if jump and jump.lower() != "none" else None}
