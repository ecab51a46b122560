"""The W&B server address geotrain passes on: WANDB_BASE_URL as a plain http(s)://host[:port][/path].

The key check (core.requirements.wandb_key) asks that server, and the pods of a workspace that logs
to W&B are given it (core.backends.kubernetes), so both judge it here first; the value is never
repeated in a message (a user:password@ in it would be a secret)."""

from __future__ import annotations

import os
import re

from core.errors import InvalidInput

# scheme, host name or IPv4 address, optional port and path: no user:password@, query, spaces or quotes
_SERVER = re.compile(r"https?://[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(?::(?P<port>[0-9]{1,5}))?"
                     r"(?:/[A-Za-z0-9._~/-]*)?")
MAX_SERVER = 512
SERVER_ENV = "WANDB_BASE_URL"  # wandb's own name for it, here and in the pods
SERVER_PROBLEM = ("WANDB_BASE_URL is not an http(s) address of the form https://host[:port][/path] (lower-case "
                  "scheme, port 1-65535; no user:password@, query, spaces or quotes)")
SERVER_TODO = "set it to your W&B server's address, or unset it for wandb's default server"


def plain_server(url: str) -> bool:
    """Whether `url` is a plain http(s)://host[:port][/path] (ASCII host name or IPv4 address)."""
    match = _SERVER.fullmatch(url) if len(url) <= MAX_SERVER else None
    return bool(match) and (match.group("port") is None or 1 <= int(match.group("port")) <= 65535)


def server_env() -> dict[str, str]:
    """{"WANDB_BASE_URL": url} for the pods of a workspace that logs to W&B, so they log where the key
    was checked; {} when this machine does not set it (the pods then take their image's wandb default,
    which is this machine's only when the two wandb versions agree: wandb 0.31 moved it). Refused in one
    line when it is not a plain http(s) address: it goes into the Job's manifest as it is. The value is
    not repeated in the message (a user:password@ in it would be a secret)."""
    url = os.environ.get(SERVER_ENV, "")
    if not url:
        return {}
    if not plain_server(url):
        raise InvalidInput(SERVER_PROBLEM, SERVER_TODO)
    return {SERVER_ENV: url.rstrip("/")}
