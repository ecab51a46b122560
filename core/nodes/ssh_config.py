"""Reading a Host entry of ~/.ssh/config (paramiko's parser), every value checked."""

from __future__ import annotations

import re
from pathlib import Path

from core.schema.endpoints import check_host, check_port
from core.schema.user_files import read_user_file
from core.errors import InvalidInput


def ssh_config_host(alias: str, config_path: str | None = None) -> dict:
    """What `~/.ssh/config` says about Host `alias`: hostname, port, user, key, jump."""
    import paramiko  # here, not at the top: the CLI imports this module at start

    path = Path(config_path or "~/.ssh/config").expanduser()
    if not path.is_file():
        raise InvalidInput(f"SSH config {path} does not exist", "give --ssh-config PATH")
    text = read_user_file(path, "SSH config", "give --ssh-config PATH")
    try:
        if re.search(r"(?im)^\s*match\b.*\bexec\b", text):  # paramiko runs it when invoke is installed
            raise InvalidInput(f"SSH config {path} has a `Match exec` line; geotrain runs no commands from it",
                               "give --ssh-config a file without `Match exec`")
        config = paramiko.SSHConfig.from_text(text)
    except (ValueError, TypeError, paramiko.ConfigParseError) as exc:
        raise InvalidInput(f"cannot read SSH config {path}: {str(exc).splitlines()[0][:200]}",
                           "give --ssh-config PATH") from None
    if alias not in config.get_hostnames():
        raise InvalidInput(f"{path}: no `Host {alias}` entry",
                           "use an alias defined there (see `grep -i '^host ' ~/.ssh/config`)")
    entry = config.lookup(alias)
    keys = entry.get("identityfile") or []
    where = f"{path} Host {alias}"
    try:
        port = check_port(entry.get("port", 22), "Port")
        hostname = check_host(entry.get("hostname", alias), "HostName")
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc.message}", f"fix it in {path}: {exc.hint}") from None
    return {"hostname": hostname, "port": port,
            "user": entry.get("user"), "key_path": keys[0] if keys else None,
            "jump": entry.get("proxyjump")}
