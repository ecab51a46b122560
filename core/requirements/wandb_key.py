"""A W&B API key: its format (the rule of wandb 0.31's `wbauth.validation.check_api_key`:
a JWT, or an optional `prefix-` then 40+ letters, digits, underscores), then the server's
answer to a `viewer` GraphQL query at the server this machine's settings name: WANDB_BASE_URL,
else the installed wandb's own default (https://api.forge.coreweave.com for wandb 0.31; older
ones, or none installed, https://api.wandb.ai), with the key as HTTP basic auth (user `api`),
as wandb's public API sends it. That is where the runs log: the local cluster's workers inherit
this machine's environment, and a Kubernetes cluster's pods are given WANDB_BASE_URL when it is set
here (core.domain.wandb_server, checked as an address first). A server that cannot be reached leaves the key
unchecked, not refused. A redirect is never followed: urllib would send the key on to wherever it points
(another host, or plain http), so the check stops there and says so."""

from __future__ import annotations

import base64
import functools
import http.client
import json
import os
import re
import urllib.error
import urllib.request

from core.domain.wandb_server import SERVER_ENV, SERVER_PROBLEM, SERVER_TODO, plain_server
from core.requirements.report import OK, UNKNOWN, Finding
from core.requirements.hub_access import ALL_NODES

FALLBACK_BASE_URL = "https://api.wandb.ai"
TIMEOUT_S = 5.0
_JWT = re.compile(r"[\w-]+\.[\w-]+\.[\w-]+")
_SECRET = re.compile(r"[\w-]+")
NEEDED = "a valid W&B API key"
WHERE = "paste the key from wandb.ai/authorize, or none (runs stay offline)"
REDIRECTS = (301, 302, 303, 307, 308)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Turns a redirect into its HTTPError, so the Authorization header goes nowhere else."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def format_problem(key: str) -> str | None:
    """What is wrong with the key's shape, or None."""
    if not key:
        return "empty"
    if _JWT.fullmatch(key):
        return None
    secret = key.split("-", 1)[-1]
    if not _SECRET.fullmatch(secret):
        return "has characters other than letters, digits, _ and -"
    if len(secret) < 40:
        return f"{len(secret)} characters, 40+ expected"
    return None


@functools.cache
def default_base_url() -> str:
    """The server wandb.init talks to when nothing says otherwise (wandb 0.31 moved it from
    api.wandb.ai): the installed wandb's setting default, read once (~1 s to import)."""
    try:
        from wandb.sdk.wandb_settings import Settings

        default = Settings.model_fields["base_url"].default
    except Exception:  # no wandb here, or one laid out otherwise: the long-standing host
        return FALLBACK_BASE_URL
    return default if isinstance(default, str) and default.startswith("http") else FALLBACK_BASE_URL


def base_url() -> str:
    return (os.environ.get("WANDB_BASE_URL") or default_base_url()).rstrip("/")


def check_wandb_key(key: str) -> Finding:
    problem = format_problem(key)
    if problem:
        return Finding(ALL_NODES, "W&B key", f"malformed ({problem})", NEEDED, WHERE)
    chosen = os.environ.get(SERVER_ENV)
    if chosen and not plain_server(chosen):  # before the key goes anywhere; the value is never shown
        return Finding(ALL_NODES, "W&B key", SERVER_PROBLEM, NEEDED, SERVER_TODO)
    server = base_url()
    request = urllib.request.Request(
        f"{server}/graphql", method="POST",
        data=json.dumps({"query": "query Viewer { viewer { id username } }"}).encode(),
        headers={"Content-Type": "application/json",
                 "Authorization": "Basic " + base64.b64encode(f"api:{key}".encode()).decode()})
    try:
        with _OPENER.open(request, timeout=TIMEOUT_S) as response:
            answer = json.loads(response.read(65536) or b"{}")
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return Finding(ALL_NODES, "W&B key", f"refused by {server} (HTTP {exc.code})", NEEDED, WHERE)
        if exc.code in REDIRECTS:
            return Finding(ALL_NODES, "W&B key", f"{server} redirected the check (HTTP {exc.code}); the key was "
                           "not sent on; format is right", NEEDED,
                           "set WANDB_BASE_URL to the address the server answers on itself", UNKNOWN)
        return Finding(ALL_NODES, "W&B key", f"{server} answered HTTP {exc.code}; format is right",
                       NEEDED, "try again later", UNKNOWN)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return Finding(ALL_NODES, "W&B key", f"could not ask {server} ({type(exc).__name__}); format is right",
                       NEEDED, "check the network if the runs should log online", UNKNOWN)
    viewer = (answer.get("data") or {}).get("viewer") if isinstance(answer, dict) else None
    if not viewer:
        return Finding(ALL_NODES, "W&B key", f"{server} knows no user for it", NEEDED, WHERE)
    return Finding(ALL_NODES, "W&B key", f"accepted by {server}", NEEDED, verdict=OK)
