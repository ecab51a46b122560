"""The watcher's notifications (issue 43): COMPLETED, FAILED and RECOVERED of a Kubernetes workspace,
POSTed by recipes/watcher.py in the cluster, so they arrive with the user's laptop closed.

The webhook's address is a credential (a Slack or Teams incoming-webhook URL is its own key): it is
the file of the workspace's Secret `<job>-notify` (core.kubernetes.notify_secret), mounted 0400 into
the watcher's pod only, and read each time an event goes out (no file: no notifications). The body
has the local notifier's shape (core.domain.notifications.message: source, workspace, event, detail,
at, text). Standard library only; no redirect is followed (the request would carry the message
elsewhere), nothing of the answer is read beyond its status, and a failure is one line that names
the event and why, never the address."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request

TIMEOUT_S = 5
ATTEMPTS = 3
MAX_URL = 2048  # as core.domain.notifications.MAX_URL
MAX_DETAIL = 500


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # the 3xx becomes an HTTPError


_OPENER = urllib.request.build_opener(_NoRedirect)


def read_url(path: str | None) -> tuple[str | None, str]:
    """(the address, '') from the Secret's file; (None, '') when there is none; (None, why) when it is unusable."""
    if not path:
        return None, ""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_URL + 2)
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"its file cannot be read ({type(exc).__name__})"
    url = raw.decode("utf-8", "replace").strip()
    if not url:
        return None, ""
    parts = urllib.parse.urlsplit(url)
    if len(url) > MAX_URL or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url) \
            or parts.scheme not in ("http", "https") or not parts.hostname:
        return None, "the address in the Secret is not an http:// or https:// URL with a host"
    return url, ""


def body(workspace: str, event: str, detail: str, at: float | None = None) -> dict:
    """The JSON body, field for field the local notifier's (core.domain.notifications.message)."""
    detail = "".join(c if c.isprintable() else " " for c in detail)[:MAX_DETAIL]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if at is None else at))
    words = f"geotrain: workspace {workspace} {event}" + (f": {detail}" if detail else "")
    return {"source": "geotrain", "workspace": workspace, "event": event, "detail": detail, "at": stamp, "text": words}


def _post_once(url: str, payload: bytes) -> str:
    request = urllib.request.Request(url, data=payload, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "geotrain-watcher"})
    try:
        with _OPENER.open(request, timeout=TIMEOUT_S) as response:  # closed unread: the status is the answer
            return "" if 200 <= response.status < 300 else f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        exc.close()
        return f"HTTP {exc.code}" + (" (a redirect, not followed)" if 300 <= exc.code < 400 else "")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return type(reason).__name__ + (f" (errno {reason.errno})" if getattr(reason, "errno", None) else "")


def send(path: str | None, workspace: str, event: str, detail: str, log) -> bool:
    """POST the event to the address in `path`, a few tries; False when there is none or it failed
    (`log`: one line, without the address; the reason is an exception's type, never its words, which
    can repeat the address)."""
    url, why = read_url(path)
    if url is None:
        if why:
            log(f"geotrain watcher: notification {event} not sent: {why}")
        return False
    payload = json.dumps(body(workspace, event, detail)).encode()
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(attempt)
        why = _post_once(url, payload)
        if not why:
            return True
    log(f"geotrain watcher: notification {event} not delivered after {ATTEMPTS} tries: {why}")
    return False
