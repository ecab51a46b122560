"""Notifications of a workspace's COMPLETED, FAILED and RECOVERED (issue 43): the webhook address's
rules and the message, pure. The address is a secret (a Slack or Teams incoming-webhook URL is its
own credential): it lives in the secret store under '<workspace>/notify', is read only by the process
that sends, and appears in no argv, log, database row, event or message. The message carries the
workspace's id, the event and its words, already free of tokens and terminal controls.

Or a local command (issue 43): the user's words split as a POSIX shell would (shlex), run without a
shell, the message as JSON on its stdin. It is kept in the secret store as well ('<id>/notify-command':
a script's arguments may carry a credential), so `--off` (the '<id>/notify' prefix) removes both."""

from __future__ import annotations

import shlex
import time
import urllib.parse

from core.domain.terminal_text import printable
from core.errors import InvalidInput

EVENTS = ("COMPLETED", "FAILED", "RECOVERED")
URL_ENV = "GEOTRAIN_NOTIFY_URL"
MAX_URL = 2048
MAX_DETAIL = 500
MAX_COMMAND = 1024


def secret_ref(workspace_id: str) -> str:
    """Where the address is kept (deleted with the workspace's other secrets: '<id>/')."""
    return f"{workspace_id}/notify"


def command_ref(workspace_id: str) -> str:
    return f"{workspace_id}/notify-command"


def mask_url(url: str) -> str:
    """What the app shows of a stored address: scheme and host only (its path is often the credential)."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}/•••" if parts.scheme and parts.hostname else "•••"


def check_command(text: str) -> list[str]:
    """The argv of a notification command: words split as a POSIX shell would, run without one (so
    `;`, `|`, `$(…)` are plain characters of an argument); the error never repeats the text."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_COMMAND \
            or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise InvalidInput(f"the notification command is empty, longer than {MAX_COMMAND} characters or has control "
                           "characters", "give a program and its arguments, e.g. notify-send geotrain")
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise InvalidInput(f"the notification command cannot be split into words ({exc})",
                           "close its quotes; it runs without a shell, the event as JSON on its stdin") from None
    if not argv or not argv[0]:
        raise InvalidInput("the notification command names no program", "e.g. notify-send geotrain")
    return argv


def check_url(url: str) -> str:
    """An http(s) address with a host, no spaces or control characters; the error never repeats it."""
    if not url or len(url) > MAX_URL or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise InvalidInput(f"the notification address is empty, longer than {MAX_URL} characters, or has spaces "
                           "or control characters", f"put the webhook's URL in {URL_ENV}, exactly as the service gave it")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput("the notification address is not an http:// or https:// URL with a host",
                           f"put the webhook's URL in {URL_ENV}, e.g. https://hooks.example.com/...")
    return url


def message(workspace_id: str, event: str, detail: str, at: float | None = None) -> dict:
    """The JSON body: what happened to which workspace. `text` is for chat webhooks (Slack, Mattermost
    and Teams' incoming webhooks show a `text` field)."""
    detail = printable(detail)[:MAX_DETAIL]
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if at is None else at))
    return {"source": "geotrain", "workspace": workspace_id, "event": event, "detail": detail, "at": when,
            "text": f"geotrain: workspace {workspace_id} {event}" + (f": {detail}" if detail else "")}
