"""Checkpoints copied out of a running pod: `tar` of the checkpoint mount through the pod
exec stream (a websocket; base64 so the client's text frames carry the bytes intact), then
unpacked here keeping only checkpoint files (`step_NNNNNNNN/rank_R.pt|json`): links,
devices, absolute or `..` names in the archive are skipped, never followed.

The stream is counted as it arrives and closed past MAX_STREAM_BYTES: the pod's own size check
(`du --apparent-size`, so sparse files count what tar sends) is a courtesy that saves sending,
not a bound, since the pod runs what it likes. Its base64 is decoded as it arrives into a private
temporary file (unlinked, 0600), holding back only the last line or two (the status line may be
among them), so memory stays a few MiB whatever the pod sends; the file holds up to
MAX_ARCHIVE_BYTES on disk. Multi-GB checkpoints want recovery.hf_repo, the HF Hub copy of record.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import tarfile
import tempfile
import time
from pathlib import Path
from typing import BinaryIO, Iterator

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
MAX_STATUS_LINE = 4096  # a longer last line is not the status line (it is data, held no longer)
BASE64_SPACE = b" \t\r\n\v\f"  # between base64 groups: `base64` wraps its lines


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


def read_checkpoint_archive(core_api: client.CoreV1Api, pod: str, namespace: str, container: str,
                            spool_dir: Path | None = None) -> BinaryIO:
    """The tar of the pod's checkpoint mount, read through the exec stream and counted as it
    arrives (past MAX_STREAM_BYTES the stream is closed and nothing more is read), decoded as it
    arrives into a private temporary file in `spool_dir` (the system's when None): returned open
    at its start, for the caller to close."""
    spool = tempfile.TemporaryFile(dir=spool_dir)  # 0600, and unlinked: gone once closed
    try:
        decoder, size = _Base64Spool(spool), 0
        chunks = _exec_stdout(core_api, pod, namespace, container)
        try:
            for chunk in chunks:
                size += len(chunk)
                if size > MAX_STREAM_BYTES:
                    raise _too_big(pod)
                decoder.feed(chunk)
        finally:
            chunks.close()  # the websocket with it
        last = decoder.last_line()
        status = last.decode("ascii", "replace").split() if last.startswith(SENTINEL.encode()) else []
        if status[1:2] == ["toobig"]:
            raise _too_big(pod)
        if status[1:] != ["0"]:
            said = f"tar exited with {status[1][:20]}" if len(status) > 1 else "the stream ended early"
            raise BackendError(f"reading the checkpoints of pod {pod} failed ({said})", AGAIN_HINT)
        if not decoder.finish():
            raise BackendError(f"the checkpoints read from pod {pod} are garbled", AGAIN_HINT)
        spool.seek(0)
        return spool
    except BaseException:
        spool.close()
        raise


class _Base64Spool:
    """Base64 text in, as it arrives; its bytes out to `out`. The last non-empty line (complete
    or not) is held back, since it may be the status line, at most MAX_STATUS_LINE bytes; the
    rest is decoded in whole 4-character groups, the remainder carried to the next chunk.
    Garbled text stops the decoding and is said by finish(), after the status line is read."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.held = bytearray()  # not yet decoded: the last line or so
        self.mid_line = False  # `held` starts inside a line already partly decoded (not the status line)
        self.carry = b""  # base64 characters short of a group of 4
        self.padded = False  # a group with '=' ended the data: nothing may follow
        self.garbled = False

    def feed(self, chunk: bytes) -> None:
        self.held += chunk
        end = len(self.held.rstrip(b"\n"))  # where the last non-empty line ends
        start = self.held.rfind(b"\n", 0, end) + 1  # and begins
        if end - start > MAX_STATUS_LINE or (start == 0 and self.mid_line):  # data, not the status line
            self._decode(bytes(self.held))
            self.mid_line = end == len(self.held)  # its rest, still to come, is data too
            self.held.clear()
            return
        self.mid_line = False
        if start:
            self._decode(bytes(self.held[:start]))
        del self.held[end + 1:]  # one newline after it says as much as many
        del self.held[:start]

    def last_line(self) -> bytes:
        """The status line, if the stream ended with one; b"" when the last line was data."""
        return b"" if self.mid_line else bytes(self.held).strip(b"\n")

    def finish(self) -> bool:
        """Whether all the data was base64, whole groups to its end."""
        if self.garbled or self.carry:
            return False
        self.out.flush()
        return True

    def _decode(self, text: bytes) -> None:
        if self.garbled:
            return
        text = self.carry + text.translate(None, BASE64_SPACE)
        whole = len(text) - len(text) % 4
        self.carry = text[whole:]
        if not whole:
            return
        try:
            if self.padded:
                raise ValueError("data after the padding")
            self.out.write(base64.b64decode(text[:whole], validate=True))
        except (binascii.Error, ValueError):
            self.garbled = True
            return
        self.padded = text[whole - 1:whole] == b"="


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


def unpack_checkpoints(archive: BinaryIO, dest: Path) -> tuple[list[str], list[str]]:
    """Write the checkpoint files of the archive (a binary file, read from where it stands)
    under `dest`; (written, skipped) names. A name already written (another pod's copy of a
    shared volume) is kept as is."""
    written, skipped = [], []
    try:
        tar = tarfile.open(fileobj=archive, mode="r:")
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
