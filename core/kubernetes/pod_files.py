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
import os
import re
import tarfile
from pathlib import Path

from kubernetes import client
from kubernetes.stream import stream

from core.errors import BackendError
from core.kubernetes.recovery_manifests import CHECKPOINT_MOUNT

CHECKPOINT_FILE = re.compile(r"step_\d{8}/rank_\d+\.(pt|json)")
MAX_ARCHIVE_BYTES = 2 << 30  # beyond this the exec stream is the wrong road: recovery.hf_repo
REQUEST_TIMEOUT_S = 900
SENTINEL = "GEOTRAIN-TAR-EXIT"  # not base64 (has '-' and a space): the last line says tar's exit code
# POSIX sh has no pipefail: tar's exit code goes out through fd 4 and is printed after the data.
# A mount larger than the limit is refused before any byte is sent.
TAR_COMMAND = ["sh", "-c",
               f"size=$(du -sk {CHECKPOINT_MOUNT} | cut -f1); "
               f"if [ \"${{size:-0}}\" -gt {MAX_ARCHIVE_BYTES // 1024} ]; then echo \"{SENTINEL} toobig $size\"; exit 0; fi; "
               f"exec 3>&1; rc=$( {{ {{ tar cf - -C {CHECKPOINT_MOUNT} .; echo $? >&4; }} | base64 >&3; }} 4>&1 ); "
               f"echo \"{SENTINEL} $rc\""]
TOO_BIG_HINT = "set recovery.hf_repo: checkpoints that large go through the HF Hub, not the pod exec stream"


def read_checkpoint_archive(core_api: client.CoreV1Api, pod: str, namespace: str, container: str) -> bytes:
    """The tar of the pod's checkpoint mount, read through the exec stream."""
    text = stream(core_api.connect_get_namespaced_pod_exec, pod, namespace, container=container,
                  command=TAR_COMMAND, stdin=False, stdout=True, stderr=False, tty=False,
                  _request_timeout=REQUEST_TIMEOUT_S)
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    text = text or ""
    if len(text) > MAX_ARCHIVE_BYTES * 4 // 3 + (MAX_ARCHIVE_BYTES >> 4):
        raise BackendError(f"the checkpoints of pod {pod} are larger than {MAX_ARCHIVE_BYTES >> 30} GiB", TOO_BIG_HINT)
    body, _, last = text.rstrip("\n").rpartition("\n")
    status = last.split() if last.startswith(SENTINEL) else []
    if status[1:2] == ["toobig"]:
        raise BackendError(f"the checkpoints of pod {pod} are larger than {MAX_ARCHIVE_BYTES >> 30} GiB", TOO_BIG_HINT)
    if status[1:] != ["0"]:
        said = f"tar exited with {status[1]}" if len(status) > 1 else "the stream ended early"
        raise BackendError(f"reading the checkpoints of pod {pod} failed ({said})",
                           "run the export again; set recovery.hf_repo for a copy on the HF Hub")
    try:
        return base64.b64decode(body)
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
    try:
        _unpack(tar, dest, written, skipped)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BackendError(f"the checkpoint archive from the pod is cut short or unreadable ({type(exc).__name__})",
                           "run the export again; set recovery.hf_repo for a copy on the HF Hub") from None
    return written, skipped


def _unpack(tar: tarfile.TarFile, dest: Path, written: list[str], skipped: list[str]) -> None:
    """Each member is written under a temporary name and renamed once read in full."""
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
            partial = target.with_name(f".{target.name}.partial")
            try:
                size = 0
                with open(partial, "xb") as out:
                    for block in iter(lambda: source.read(1 << 20), b""):
                        out.write(block)
                        size += len(block)
                if size != member.size:
                    raise EOFError(f"{name}: {size} of {member.size} bytes")
                os.rename(partial, target)
            finally:
                if partial.exists():
                    partial.unlink()
            written.append(name)
