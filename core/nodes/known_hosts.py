"""geotrain's own known_hosts file: host keys pinned on first contact, checked after.

Kept apart from ~/.ssh/known_hosts so that geotrain never edits the user's file. The
format is OpenSSH's (`[host]:port keytype base64`), so `ssh-keygen -F` can read it.
Pins are written only by `pin()` + `save()`, so a failed import leaves the file as it was.
A host reached through a jump host is pinned as `jump:[bastion]:port>host` (OpenSSH
tools skip such names); pins made before under the bare name are migrated on use.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from pathlib import Path

from core.state.atomic_files import locked, write_atomically
from core.state import paths


def host_label(host: str, port: int) -> str:
    """The name OpenSSH gives a host in known_hosts."""
    return host if port == 22 else f"[{host}]:{port}"


def route_label(label: str, jump: tuple[str, int] | None = None) -> str:
    """The pin's name: `label` (host or [host]:port) prefixed by the jump host it is
    reached through, as two bastions may each front a different 10.0.0.5."""
    return f"jump:{host_label(*jump)}>{label}" if jump else label


def fingerprint(key_blob: bytes) -> str:
    """SHA256 fingerprint, as `ssh-keygen -l` and OpenSSH's first-contact prompt show it."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key_blob).digest()).decode().rstrip("=")


def known_hosts_path() -> Path:
    return paths.home() / "known_hosts"


class KnownHosts:
    """Pinned keys by host label; thread-safe; pins buffered until save()."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path else known_hosts_path()
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[str, str]] = {}

    def _read(self) -> dict[str, list[tuple[str, str]]]:
        keys: dict[str, list[tuple[str, str]]] = {}
        if not self.path.exists():
            return keys
        for line in self.path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and not line.startswith("#"):
                for label in parts[0].split(","):
                    keys.setdefault(label, []).append((parts[1], parts[2]))
        return keys

    def lookup(self, label: str) -> list[tuple[str, str]]:
        """Keys (type, base64) pinned for `label`, pending pins included."""
        with self._lock:
            if label in self._pending:
                return [self._pending[label]]
            return self._read().get(label, [])

    def pin(self, label: str, key_type: str, key_b64: str) -> None:
        """Remember a key for `label` (replacing any earlier one) until save()."""
        with self._lock:
            self._pending[label] = (key_type, key_b64)

    def discard_pending(self) -> None:
        with self._lock:
            self._pending.clear()

    def save(self) -> None:
        """Write pending pins; re-reads the file under a lock so concurrent writers merge."""
        with self._lock:
            if not self._pending:
                return
            with locked(self.path):
                lines = self.path.read_text().splitlines() if self.path.exists() else []
                kept = [ln for ln in lines if ln.split()[:1] and ln.split()[0] not in self._pending]
                kept += [f"{label} {t} {b}" for label, (t, b) in sorted(self._pending.items())]
                write_atomically(self.path, "\n".join(kept) + "\n")
            self._pending.clear()

    def forget(self, label: str) -> bool:
        """Drop every key pinned for `label`; True when there was one."""
        with self._lock:
            keys = self._read()
            if label not in keys:
                return False
            self._pending.pop(label, None)
            with locked(self.path):
                lines = self.path.read_text().splitlines()
                kept = [ln for ln in lines if not ln.split()[:1] or ln.split()[0] != label]
                write_atomically(self.path, "\n".join(kept) + ("\n" if kept else ""))
            return True
