"""Upload checkpoints to the HF Hub in a background thread; failures are reported, training goes on.

Rank 0 uploads its own checkpoint file (it holds the synchronised global weights,
the optimizer states and the config), then its manifest (bytes and sha256,
recipes.checkpoint_store) so that whoever pulls it can check it. The token comes from
HF_TOKEN only and is never printed: error messages pass through `redact`.
"""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path

from recipes.telemetry import redact, say


class HubUploader:
    """One worker thread, uploads in order; `wait()` drains the queue at the end of training."""

    def __init__(self, repo: str, *, private: bool = True, api=None) -> None:
        self.repo, self.private = repo, private
        self.failures = 0
        self.uploaded: list[str] = []
        token = os.environ.get("HF_TOKEN")
        if api is None and not token:
            say(0, f"checkpoint.hf_repo is {repo!r} but HF_TOKEN is not set; checkpoints stay local")
            self.api = None
            return
        if api is None:
            from huggingface_hub import HfApi

            api = HfApi(token=token)
        self.api = api
        self._repo_ready = False
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="hf-upload", daemon=True)
        self._thread.start()

    def upload(self, path: Path) -> None:
        if self.api is not None:
            self._queue.put(Path(path))

    def wait(self) -> None:
        if self.api is not None:
            self._queue.put(None)
            self._thread.join()

    def _work(self) -> None:
        while (path := self._queue.get()) is not None:
            folder = f"checkpoints/{path.parent.name}"
            target, manifest = f"{folder}/{path.name}", path.with_suffix(".json")
            try:
                if not self._repo_ready:
                    self.api.create_repo(self.repo, private=self.private, exist_ok=True)
                    self._repo_ready = True
                for each in (path, manifest) if manifest.is_file() else (path,):  # the manifest last
                    self.api.upload_file(path_or_fileobj=str(each), path_in_repo=f"{folder}/{each.name}",
                                         repo_id=self.repo, commit_message=f"checkpoint {path.parent.name}")
                self.uploaded.append(target)
                say(0, f"uploaded {target} to hf.co/{self.repo}")
            except Exception as exc:  # the hub being down must not stop training
                self.failures += 1
                say(0, f"upload of {target} to {self.repo} failed ({type(exc).__name__}: "
                       f"{redact(str(exc))[:300]}); training continues")
