"""Can this HF token read a gated Hub dataset (ImageNet-1k is `ILSVRC/imagenet-1k`)?

Asked through huggingface_hub's `auth_check` (GET /api/datasets/REPO/auth-check) at
HF_ENDPOINT (default https://huggingface.co): 403 GatedRepo means the account has not
accepted the dataset's terms, 401 that the token itself is refused. Only status codes
and error codes are read, never the server's text."""

from __future__ import annotations

import os

from core.requirements.report import OK, UNKNOWN, Finding

DEFAULT_ENDPOINT = "https://huggingface.co"
ALL_NODES = "all nodes"


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def dataset_access(repo: str, token: str | None) -> Finding:
    hub = endpoint()
    needed = f"read access to {repo} (gated)"
    accept = f"with the token's account, accept the terms at {hub}/datasets/{repo}, then deploy again"
    if not token:
        return Finding(ALL_NODES, "dataset access", "no HF token given", needed,
                       f"{accept} with HF_TOKEN or --ask-tokens")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        HfApi(endpoint=hub).auth_check(repo, repo_type="dataset", token=token)
    except GatedRepoError as exc:
        return Finding(ALL_NODES, "dataset access", f"refused: not granted (HTTP {_code(exc)})", needed, accept)
    except RepositoryNotFoundError as exc:
        return Finding(ALL_NODES, "dataset access", f"refused: not visible to this token (HTTP {_code(exc)})",
                       needed, accept)
    except HfHubHTTPError as exc:
        if _code(exc) in (401, 403):
            return Finding(ALL_NODES, "dataset access", f"the Hub refused the token (HTTP {_code(exc)})",
                           needed, f"create a read token at {hub}/settings/tokens and pass it (HF_TOKEN or --ask-tokens)")
        return Finding(ALL_NODES, "dataset access", f"the Hub answered HTTP {_code(exc)}", needed,
                       "try again later", UNKNOWN)
    except Exception as exc:  # network down, offline mode: the nodes may still reach it
        return Finding(ALL_NODES, "dataset access", f"could not ask {hub} ({type(exc).__name__})", needed,
                       "check the network; the nodes need the Hub to download the dataset", UNKNOWN)
    return Finding(ALL_NODES, "dataset access", "granted", needed, verdict=OK)


def _code(exc: Exception) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)
