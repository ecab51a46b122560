"""Small, valid OCI image archives (image layout tars, as `ctr images export` writes them) for the
air-gap bundle tests: one layer with one file, its config, manifest and index, digests real, so
a real containerd imports them."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _blob(tar: tarfile.TarFile, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    _add(tar, f"blobs/sha256/{digest}", data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def oci_archive(path: Path, name: str, arch: str) -> Path:
    """An image named `name` (io.containerd.image.name) for linux/`arch`."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as files:
        _add(files, "hello.txt", f"{name}\n".encode())
    with tarfile.open(path, "w") as tar:
        layer_ref = _blob(tar, layer.getvalue())
        config = {"architecture": arch, "os": "linux", "config": {},
                  "rootfs": {"type": "layers", "diff_ids": [layer_ref["digest"]]}}
        config_ref = _blob(tar, json.dumps(config).encode())
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config_ref},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer_ref}]}
        manifest_ref = _blob(tar, json.dumps(manifest).encode())
        index = {"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest_ref,
            "platform": {"architecture": arch, "os": "linux"},
            "annotations": {"io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}}]}
        _add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add(tar, "index.json", json.dumps(index).encode())
    return path


def docker_archive(path: Path, tags: list[str]) -> Path:
    """The index part of a `docker save` tar (manifest.json with RepoTags): enough to name it."""
    with tarfile.open(path, "w") as tar:
        _add(tar, "manifest.json", json.dumps([{"Config": "c.json", "RepoTags": tags, "Layers": []}]).encode())
    return path
