"""A Shell that runs commands on this machine (a real /bin/sh), for tests without SSH."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from core.bootstrap.session import Result


class LocalShell:
    def __init__(self) -> None:
        self.commands: list[str] = []

    def run(self, command: str, timeout: float = 60, sudo: bool = False) -> Result:
        self.commands.append(command)
        done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True,
                              timeout=timeout)
        return Result(done.returncode, done.stdout, done.stderr)

    def put(self, data: bytes | Path, remote_path: str, mode: int = 0o644, sudo: bool = False) -> None:
        path = Path(remote_path)  # created with its mode, as Connection.put does
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode & 0o700)
        with os.fdopen(fd, "wb") as out:
            out.write(data.read_bytes() if isinstance(data, Path) else data)
        os.chmod(path, mode)
