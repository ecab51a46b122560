"""Checkpoints copied out of a running pod: `tar` of the checkpoint mount through the pod
exec stream (a websocket; base64 so the client's text frames carry the bytes intact), then
unpacked here keeping only checkpoint files (`step_NNNNNNNN/rank_R.pt|json`): links,
devices, absolute or `..` names in the archive are skipped, never followed.

The whole archive is held in memory: fine for the tiny and medium models, not for a
multi-GB checkpoint (those want recovery.hf_repo, the HF Hub copy of record).
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import tarfile
from pathlib import Path

from kubernetes import client
from kubernetes.stream import stream

from core.errors import BackendError
from core.kubernetes.recovery_manifests import CHECKPOINT_MOUNT

CHECKPOINT_FILE = re.compile(r"step_\d{8}/rank_\d+\.(pt|json)")
TAR_COMMAND = ["sh", "-c", f"tar cf - -C {CHECKPOINT_MOUNT} . | base64"]


def read_checkpoint_archive(core_api: client.CoreV1Api, pod: str, namespace: str, container: str) -> bytes:
    """The tar of the pod's checkpoint mount, read through the exec stream."""
    text = stream(core_api.connect_get_namespaced_pod_exec, pod, namespace, container=container,
                  command=TAR_COMMAND, stdin=False, stdout=True, stderr=False, tty=False)
    try:
        return base64.b64decode(text or b"")
    except (binascii.Error, ValueError):
        raise BackendError(f"the checkpoints read from pod {pod} are garbled",
                           "run the export again; set recovery.hf_repo for a copy on the HF Hub") from None


def unpack_checkpoints(archive: bytes, dest: Path) -> tuple[list[str], list[str]]:
    """Write the archive's checkpoint files under `dest`; (written, skipped) names.
    A name already written (another pod's copy of a shared volume) is kept as is."""
    written, skipped = [], []
    try:
        tar = tarfile.open(fileobj=io.BytesIO(archive), mode="r:")
    except tarfile.TarError:
        raise BackendError("the checkpoint archive from the pod is not a tar file",
                           "check that the image has tar and base64, then export again") from None
    with tar:
        for member in tar:
            name = member.name.removeprefix("./")
            if member.isdir() or name in ("", "."):
                continue
            if not member.isreg() or not CHECKPOINT_FILE.fullmatch(name):
                skipped.append(name)
                continue
            target = dest / name
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            with open(target, "xb") as out:
                for block in iter(lambda: source.read(1 << 20), b""):
                    out.write(block)
            written.append(name)
    return written, skipped
