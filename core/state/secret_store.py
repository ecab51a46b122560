"""Tokens (W&B, HF, join tokens, passwords) in one 0600 file, and redaction for logs.

The database and manifests hold only references ("ws-abc/wandb"); the values live here
and reach workers through their environment.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from core.state.atomic_files import locked, write_atomically
from core.state import paths
from core.errors import GeotrainError, InvalidInput

_MIN_SECRET_LEN = 6
# Token kind -> the environment variable that carries it to workers.
# "registry" (a private --image registry's USER:PASSWORD) becomes the workspace's pull Secret,
# never a pod's env (core.kubernetes.registry_auth).
TOKEN_ENV = {"wandb": "WANDB_API_KEY", "hf": "HF_TOKEN", "registry": "GEOTRAIN_REGISTRY_AUTH"}


class SecretStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path else paths.secrets_path()

    def _load(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (ValueError, UnicodeDecodeError, RecursionError):
            data = None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise GeotrainError(f"the secret store {self.path} is corrupt (not a mapping of names to tokens)",
                                "move it away and pass your tokens again")
        return data

    def _locked(self):
        """Serialise read-modify-write between the app and the CLI."""
        return locked(self.path)

    def _save(self, data: dict[str, str]) -> None:
        write_atomically(self.path, json.dumps(data))

    def put(self, ref: str, value: str) -> str:
        with self._locked():
            data = self._load()
            data[ref] = value
            self._save(data)
        return ref

    def get(self, ref: str) -> str | None:
        return self._load().get(ref)

    def tokens(self, refs: dict[str, str]) -> dict[str, str]:
        """Env var -> token for each reference (refs are all the database holds); one that is
        missing is refused in one line naming the variable."""
        data, values = self._load(), {}
        for env, ref in refs.items():
            if data.get(ref) is None:
                raise InvalidInput(f"the token for {env} ({ref}) is not in the secret store",
                                   "deploy again with the token in WANDB_API_KEY/HF_TOKEN, or --ask-tokens")
            values[env] = data[ref]
        return values

    def delete_prefix(self, prefix: str) -> None:
        with self._locked():
            data = self._load()
            kept = {k: v for k, v in data.items() if not k.startswith(prefix)}
            if kept != data:
                self._save(kept)

    def values(self, prefix: str = "") -> list[str]:
        """The tokens whose reference starts with `prefix` ("ws-abc/": one workspace's)."""
        return [value for ref, value in self._load().items() if ref.startswith(prefix)]


def redact(text: str, secrets: list[str]) -> str:
    """Replace every occurrence of a known secret (and bearer-like tokens) with ***."""
    for value in sorted(secrets, key=len, reverse=True):
        if value and len(value) >= _MIN_SECRET_LEN:
            text = text.replace(value, "***")
    return re.sub(r"(?i)(authorization:\s*bearer\s+)\S+", r"\1***", text)
