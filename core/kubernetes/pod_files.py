"""Checkpoints copied out of a running pod: `tar` of the checkpoint mount through the pod
exec stream (a websocket; base64 so the client's text frames carry the bytes intact), then
unpacked here keeping only checkpoint files (`step_NNNNNNNN/rank_R.pt|json`): links,
devices, absolute or `..` names in the archive are skipped, never followed.

The stream is counted as it arrives and closed past MAX_STREAM_BYTES: the pod's own size check
(`du --apparent-size`, so sparse files count what tar sends) is a courtesy that saves sending,
not a bound, since the pod runs what it likes. What arrived is held in memory: fine for the tiny
and medium models, not for a multi-GB checkpoint (those want recovery.hf_repo, the HF Hub copy
of record).
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
import tarfile
import time
from pathlib import Path
from typing import Iterator

from kubernetes import client
from kubernetes.stream import stream
from websocket import ABNF

from core.errors import BackendError
from core.kubernetes.recovery_manifests import CHECKPOINT_MOUNT

CHECKPOINT_FILE = re.compile(r"step_\d{8}/rank_\d+\.(pt|json)")
MAX_ARCHIVE_BYTES = 2 << 30  # beyond this the exec stream is the wrong road: recovery.hf_repo
MAX_STREAM_BYTES = MAX_ARCHIVE_BYTES * 4 // 3 + (MAX_ARCHIVE_BYTES >> 4)  # its base64, line breaks and all
REQUEST_TIMEOUT_S = 900  # the whole copy
READ_TIMEOUT_S = 120  # one silence of the stream
STDOUT_CHANNEL = 1  # the first byte of each frame of Kubernetes' exec channel protocol (v4 and v5)
SENTINEL = "GEOTRAIN-TAR-EXIT"  # not base64 (has '-' and a space): the last line says tar's exit code
TOO_BIG_HINT = "set recovery.hf_repo: checkpoints that large go through the HF Hub, not the pod exec stream"
AGAIN_HINT = "run the export again; set recovery.hf_repo for a copy on the HF Hub"


def tar_command(mount: str, limit: int) -> list[str]:
    """`tar | base64` of `mount`, refused before any byte is sent when its files' apparent size
    (what tar sends: a sparse file's holes included) is over `limit` bytes. POSIX sh has no
    pipefail: tar's exit code goes out through fd 4 and is printed after the data."""
    return ["sh", "-c",
            f"size=$(du -sk --apparent-size {mount} 2>/dev/null | cut -f1); "
            f"if [ \"${{size:-0}}\" -gt {limit // 1024} ]; then echo \"{SENTINEL} toobig $size\"; exit 0; fi; "
            f"exec 3>&1; rc=$( {{ {{ tar cf - -C {mount} .; echo $? >&4; }} | base64 >&3; }} 4>&1 ); "
            f"echo \"{SENTINEL} $rc\""]


TAR_COMMAND = tar_command(CHECKPOINT_MOUNT, MAX_ARCHIVE_BYTES)


def _too_big(pod: str) -> BackendError:
    return BackendError(f"the checkpoints of pod {pod} are larger than {MAX_ARCHIVE_BYTES >> 30} GiB", TOO_BIG_HINT)


def read_checkpoint_archive(core_api: client.CoreV1Api, pod: str, namespace: str, container: str) -> bytes:
    """The tar of the pod's checkpoint mount, read through the exec stream and counted as it
    arrives: past MAX_STREAM_BYTES the stream is closed and nothing more is read."""
    received, size = [], 0
    chunks = _exec_stdout(core_api, pod, namespace, container)
    try:
        for chunk in chunks:
            size += len(chunk)
            if size > MAX_STREAM_BYTES:
                raise _too_big(pod)
            received.append(chunk)
    finally:
        chunks.close()  # the websocket with it
    body, _, last = b"".join(received).rstrip(b"\n").rpartition(b"\n")
    status = last.decode("ascii", "replace").split() if last.startswith(SENTINEL.encode()) else []
    if status[1:2] == ["toobig"]:
        raise _too_big(pod)
    if status[1:] != ["0"]:
        said = f"tar exited with {status[1][:20]}" if len(status) > 1 else "the stream ended early"
        raise BackendError(f"reading the checkpoints of pod {pod} failed ({said})", AGAIN_HINT)
    try:
        return base64.b64decode(body)
    except (binascii.Error, ValueError):
        raise BackendError(f"the checkpoints read from pod {pod} are garbled", AGAIN_HINT) from None


def _exec_stdout(core_api: client.CoreV1Api, pod: str, namespace: str, container: str) -> Iterator[bytes]:
    """TAR_COMMAND's stdout, frame by frame as the server sends it, until it closes the stream.
    The frames are read here, not by the client's WSClient, which gathers every frame waiting
    (and, preloading, the whole stream) before a caller could count one."""
    ws = stream(core_api.connect_get_namespaced_pod_exec, pod, namespace, container=container,
                command=TAR_COMMAND, stdin=False, stdout=True, stderr=False, tty=False,
                _preload_content=False)
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    try:
        ws.sock.settimeout(READ_TIMEOUT_S)
        while time.monotonic() < deadline:
            opcode, frame = ws.sock.recv_data_frame(True)
            if opcode == ABNF.OPCODE_CLOSE:
                return
            data = frame.data if isinstance(frame.data, bytes) else frame.data.encode()
            if opcode in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT) and data[:1] == bytes([STDOUT_CHANNEL]):
                yield data[1:]
        raise BackendError(f"copying the checkpoints of pod {pod} took longer than {REQUEST_TIMEOUT_S} s",
                           AGAIN_HINT)
    finally:
        ws.close(timeout=0)  # at once: a graceful close would read on until the server's close frame


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
                           AGAIN_HINT) from None
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
