"""Optional registry mirrors for the nodes' containerd: `clusters deploy --registry-mirror
docker.io=https://mirror.example.com` makes every pull of that registry's images (kubelet's, and
the images step's `ctr images pull --hosts-dir`) try the mirror first, then the registry itself.

containerd reads a registry's hosts from `<config_path>/<registry>/hosts.toml` once the CRI
plugin's registry `config_path` names the directory (containerd docs/hosts.md, "Registry Host
Namespace" and its docker.io mirror example; docs/cri/config.md for the config_path key in
config versions 2 and 3). Docker Hub's images are served by registry-1.docker.io."""

from __future__ import annotations

import re

from core.errors import InvalidInput

CERTS_DIR = "/etc/containerd/certs.d"
_REGISTRY = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?(?::[0-9]{1,5})?")
_URL = re.compile(r"https?://[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~/-]{0,200})?")
HINT = "give --registry-mirror REGISTRY=URL, e.g. docker.io=https://mirror.example.com"


def parse_mirrors(items: list[str] | dict) -> dict[str, str]:
    """{registry: mirror URL} from REGISTRY=URL items (or a stored mapping), each checked whole."""
    pairs = items.items() if isinstance(items, dict) else (item.partition("=")[::2] for item in items)
    mirrors: dict[str, str] = {}
    for registry, url in pairs:
        if not isinstance(registry, str) or not _REGISTRY.fullmatch(registry):
            raise InvalidInput(f"registry mirror: {str(registry)[:80]!r} is not a registry host name", HINT)
        if not isinstance(url, str) or not _URL.fullmatch(url):
            raise InvalidInput(f"registry mirror for {registry}: {str(url)[:80]!r} is not an http(s) URL", HINT)
        if registry in mirrors:
            raise InvalidInput(f"registry mirror: {registry} is given twice", HINT)
        mirrors[registry] = url
    return mirrors


def upstream(registry: str) -> str:
    """The registry's own endpoint, tried after the mirror (Docker Hub's is registry-1.docker.io)."""
    return "https://registry-1.docker.io" if registry == "docker.io" else f"https://{registry}"


def hosts_path(registry: str) -> str:
    return f"{CERTS_DIR}/{registry}/hosts.toml"


def hosts_toml(registry: str, mirror: str) -> str:
    """The registry's hosts.toml: the mirror for pulls and tag resolution, then the registry."""
    return (f"# Written by geotrain: {registry} through a mirror first (containerd docs/hosts.md)\n"
            f'server = "{upstream(registry)}"\n\n'
            f'[host."{mirror}"]\n'
            '  capabilities = ["pull", "resolve"]\n')
