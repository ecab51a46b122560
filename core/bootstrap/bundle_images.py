"""Container images from the air-gap bundle: `DIR/images/*.tar`, imported on each node.

An offline site saves the images its nodes run (Volcano's, the device plugins', the training
image: `docker save` or `ctr images export` writes such a tar) into the bundle's images/
folder; a file named `...-amd64.tar` or `...-arm64.tar` goes only to nodes of that CPU, any
other to every node. Each is streamed to the node and imported into the namespace the kubelet
reads (`ctr -n k8s.io images import --platform linux/<arch>`, as k3s's own air-gap images are),
and skipped where every image it holds is already there. The images a tar holds are read from
its index (OCI image layout index.json, annotation io.containerd.image.name; docker-archive
manifest.json, RepoTags), so preflight can leave them out of what a node still fetches.
"""

from __future__ import annotations

import json
import re
import shlex
import tarfile
from pathlib import Path

from core.bootstrap.containerd import SOCKET
from core.bootstrap.plan import DeployContext, NodeTarget
from core.bootstrap.session import StepFailed
from core.domain.architectures import RELEASE_ARCH, node_arch
from core.domain.images import qualified

SUBDIR = "images"
REMOTE_DIR = "/var/lib/geotrain/images"
INDEX_LIMIT = 1 << 20  # index.json / manifest.json are small; a larger one is not an image archive
REF = re.compile(r"[a-z0-9][a-zA-Z0-9._/:@+-]{0,254}")
CTR = f"ctr --address {SOCKET} -n k8s.io"


def archives(bundle: str | None, arch: str) -> list[Path]:
    """The bundle's image tars a node of `arch` takes (name order)."""
    folder = Path(bundle or "") / SUBDIR
    if not bundle or not folder.is_dir():
        return []
    others = set(RELEASE_ARCH.values()) - {arch}
    return sorted(p for p in folder.glob("*.tar")
                  if p.is_file() and not any(p.name.endswith(f"-{o}.tar") for o in others))


def _json_member(tar: tarfile.TarFile, name: str):
    try:
        member = tar.getmember(name)
    except KeyError:
        return None
    if not member.isfile() or member.size > INDEX_LIMIT:
        raise ValueError(f"its {name} is not a small regular file")
    return json.loads(tar.extractfile(member).read().decode())


def archive_refs(path: Path) -> list[str]:
    """The fully qualified names of the images in an image tar; a one-line StepFailed for a file
    that is not one (compressed, no index, or names that are not image references)."""
    try:
        with tarfile.open(path, "r:") as tar:
            oci, docker = _json_member(tar, "index.json"), _json_member(tar, "manifest.json")
    except (tarfile.TarError, OSError, ValueError, UnicodeDecodeError) as exc:
        raise StepFailed(f"air-gap bundle file {path} is not a plain image tar ({exc}): write it with "
                         "`docker save` or `ctr images export`, uncompressed") from None
    names = [m.get("annotations", {}).get("io.containerd.image.name")
             for m in (oci or {}).get("manifests", []) if isinstance(m, dict)]
    names += [t for entry in (docker or []) if isinstance(entry, dict) for t in entry.get("RepoTags") or []]
    refs = sorted({qualified(n) for n in names if isinstance(n, str) and REF.fullmatch(n)})
    if not refs:
        raise StepFailed(f"air-gap bundle file {path} names no image (no io.containerd.image.name in its "
                         "index.json, no RepoTags in its manifest.json): save it with its name")
    return refs


def bundled_refs(bundle: str | None, arch: str) -> set[str]:
    """Every image the bundle carries for a node of `arch`."""
    return {ref for path in archives(bundle, arch) for ref in archive_refs(path)}


def _present(target: NodeTarget, refs: list[str]) -> bool:
    probe = " && ".join(f"{CTR} images ls -q name=={shlex.quote(r)} | grep -qxF {shlex.quote(r)}" for r in refs)
    return target.session.fact(probe).ok


def import_phase(ctx: DeployContext, target: NodeTarget) -> str:
    """Stream each of the node's bundle tars and import it, unless its images are there already."""
    arch = node_arch(target.gather_facts())
    found = archives(ctx.plan.k3s.bundle, arch)
    if not found:
        return "no images in the bundle"
    imported = []
    for path in found:
        refs = archive_refs(path)
        if not target.session.dry_run and _present(target, refs):
            continue
        remote = f"{REMOTE_DIR}/{path.name}"
        target.session.change(f"mkdir -p -m 700 {REMOTE_DIR}", what="creating the image dir")
        target.session.put(remote, path, mode=0o600)
        target.session.change(f"{CTR} images import --platform {shlex.quote('linux/' + arch)} {shlex.quote(remote)}"
                              f" && rm -f {shlex.quote(remote)}", timeout=3600,
                              what=f"importing {', '.join(refs)}")
        imported += refs
    return f"imported {', '.join(imported)}" if imported else "bundle images present"
