"""SFTP details of Connection.put(): a file created private by the open itself.

Kept beside core/nodes/ssh.py (the two modules that import paramiko) so each stays short.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import paramiko
from paramiko import sftp as sftp_const

PRIVATE_MODE = 0o600
CHUNK = 1 << 20  # a local file goes up in 1 MiB writes, never read whole


def write_payload(handle: paramiko.SFTPFile, payload: bytes | Path) -> None:
    """Write bytes, or stream a local file (pipelined: no round trip per chunk)."""
    if not isinstance(payload, Path):
        handle.write(payload)
        return
    handle.set_pipelined(True)
    with payload.open("rb") as source:
        while chunk := source.read(CHUNK):
            handle.write(chunk)


def install_command(staged: str, remote_path: str, mode: int) -> str:
    """Root copies `staged` into a 0600 `mktemp` file next to `remote_path`, then renames."""
    src, dest = shlex.quote(staged), shlex.quote(remote_path)
    parent = shlex.quote(remote_path.rpartition("/")[0] or "/")
    return (f"t=$(mktemp -p {parent} .geotrain-upload.XXXXXXXXXX) && cat {src} > \"$t\""
            f" && chmod {mode:o} \"$t\" && mv -f \"$t\" {dest};"
            f" rc=$?; [ $rc = 0 ] || rm -f \"$t\"; exit $rc")


def create_private(sftp: paramiko.SFTPClient, path: str) -> paramiko.SFTPFile:
    """Open a NEW file for writing with mode 0600 sent in the OPEN request itself.

    paramiko's `open()` sends no attributes (the server creates 0666 & ~umask), so the
    request is made here: SSH_FXP_OPEN with CREAT|EXCL and the permissions attribute
    (draft-ietf-secsh-filexfer-02 section 6.3; OpenSSH sftp-server.c process_open).
    """
    attrs = paramiko.SFTPAttributes()
    attrs.st_mode = PRIVATE_MODE
    flags = sftp_const.SFTP_FLAG_WRITE | sftp_const.SFTP_FLAG_CREATE | sftp_const.SFTP_FLAG_EXCL
    kind, msg = sftp._request(sftp_const.CMD_OPEN, path, flags, attrs)
    if kind != sftp_const.CMD_HANDLE:
        raise paramiko.SFTPError("Expected handle")
    return paramiko.SFTPFile(sftp, msg.get_binary(), "wb")


def remove_quietly(sftp: paramiko.SFTPClient, path: str) -> None:
    try:
        sftp.remove(path)
    except (OSError, paramiko.SSHException):
        pass
