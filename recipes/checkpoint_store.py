"""Checkpoints that outlive a node: per-rank files with a manifest written last, kept
in a local or mounted directory and, when an HF repo is set, mirrored to the HF Hub
as the copy of record.

A rank's checkpoint of step S is `step_S/rank_R.pt` plus `step_S/rank_R.json`
(bytes and sha256 of the .pt). The manifest is written only after the .pt is on disk,
so a checkpoint without a manifest, or whose file does not match it, is half-written
(a kill mid-save, a truncated copy) and is skipped with a warning, never loaded.

Checkpoints are read with torch's weights-only unpickler: tensors, numbers, strings and
containers only. A file that would build any other object (a planted pickle whose
`__reduce__` runs code) is refused and skipped like a corrupt one; nothing in it runs.

Every load checks the file against its manifest's sha256 (from the same open file it then
reads), not only the completeness check before it. Checkpoints pulled from the hub go
straight to this workspace's own checkpoint directory, never through the HF cache:
huggingface_hub hands back a cached file without checking it, and a cache shared with other
workspaces (a node's) would let them plant the weights this one resumes from.

Settings come from the environment the backend sets:
    GEOTRAIN_CHECKPOINT_DIR        where checkpoints go (default <out_dir>/checkpoints)
    GEOTRAIN_CHECKPOINT_HF_REPO    HF repo mirrored to (needs HF_TOKEN; HF_ENDPOINT honoured)
    GEOTRAIN_CHECKPOINT_WANDB_ARTIFACTS=1   W&B artifacts as a copy of record (recipes.wandb_artifacts)
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import shutil
import sys
import tempfile
import threading
import warnings
import zipfile
from pathlib import Path

import torch

from recipes.telemetry import one_line
from recipes.wandb_artifacts import mirror_from_env

STEP_DIR = re.compile(r"step_([0-9]{8})")  # fullmatch, ASCII digits: no trailing newline, no "٩" read as 9


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return _sha256_of(fh)


def _sha256_of(fh) -> str:
    digest = hashlib.sha256()
    for block in iter(lambda: fh.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def checkpoint_dir(out_dir: Path) -> Path:
    return Path(os.environ.get("GEOTRAIN_CHECKPOINT_DIR") or Path(out_dir) / "checkpoints")


def step_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:08d}"


def rank_files(root: Path, step: int, rank: int) -> tuple[Path, Path]:
    folder = step_dir(root, step)
    return folder / f"rank_{rank}.pt", folder / f"rank_{rank}.json"


class CheckpointRefused(Exception):
    """A checkpoint file that is not plain tensors and data (or not a checkpoint at all)."""


def safe_load(path, mmap: bool = False) -> dict:
    """Load a checkpoint without running code from it (torch's weights-only unpickler); `path`: a
    path, or a file open for reading (then read whole)."""
    mmap = mmap and isinstance(path, (str, Path)) and zipfile.is_zipfile(path)  # a bare pickle: read whole
    try:
        with warnings.catch_warnings():  # torch warns (multi-line) about odd pickle protocols
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:  # what weights_only raises, e.g. for a forbidden global
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        named = next((line for line in lines if "GLOBAL" in line), "")
        if named:
            raise CheckpointRefused("it would build objects a checkpoint may not hold, so code could "
                                    f"run ({named[:200]})") from None
        raise CheckpointRefused(f"it is not a readable checkpoint ({(lines or ['?'])[0][:200]})") from None
    except (RuntimeError, ValueError, EOFError, OSError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise CheckpointRefused(f"it is not a readable checkpoint ({first[:200]})") from None
    if not isinstance(state, dict):
        raise CheckpointRefused(f"it holds a {type(state).__name__}, not a checkpoint mapping")
    return state


def _weights_only_problem(path: Path) -> str | None:
    """Why `path` may not be loaded (safe_load's refusal), or None."""
    try:
        safe_load(path, mmap=True)
    except CheckpointRefused as exc:
        return str(exc)
    return None


class CheckpointStore:
    """One rank's view of its checkpoints in a directory, plus the optional hub mirror."""

    def __init__(self, out_dir: Path, rank: int, keep: int = 2) -> None:
        self.root = checkpoint_dir(out_dir)
        self.rank, self.keep = rank, keep
        repo = os.environ.get("GEOTRAIN_CHECKPOINT_HF_REPO")
        self.hub = HubMirror(repo) if repo and os.environ.get("HF_TOKEN") else None
        self.artifacts = mirror_from_env()  # recovery.wandb_artifacts (recipes.wandb_artifacts)

    # writing ----------------------------------------------------------------
    def save(self, step: int, state: dict) -> Path:
        data_path, manifest_path = rank_files(self.root, step, self.rank)
        data_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = data_path.with_name(f".{data_path.name}.tmp")
        torch.save(state, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, data_path)
        manifest = {"step": step, "rank": self.rank, "file": data_path.name,
                    "bytes": data_path.stat().st_size, "sha256": _sha256(data_path)}
        _write_atomic(manifest_path, json.dumps(manifest).encode())  # last: marks it complete
        self._prune()
        if self.hub is not None:
            self.hub.upload(data_path, manifest_path, f"{data_path.parent.name}")
        if self.artifacts is not None:
            self.artifacts.save(data_path, manifest_path)
        return data_path

    def _prune(self) -> None:
        for step in self.steps_on_disk()[:-self.keep] if self.keep > 0 else []:
            for path in rank_files(self.root, step, self.rank):
                path.unlink(missing_ok=True)
            try:  # ranks share the directory: the last one out removes it (rmdir fails if not empty)
                step_dir(self.root, step).rmdir()
            except OSError:
                pass

    # reading ----------------------------------------------------------------
    def steps_on_disk(self) -> list[int]:
        if not self.root.is_dir():
            return []
        found = []
        for child in self.root.iterdir():
            match = STEP_DIR.fullmatch(child.name)
            if match and ((child / f"rank_{self.rank}.pt").exists()
                          or (child / f"rank_{self.rank}.json").exists()):
                found.append(int(match.group(1)))
        return sorted(found)

    def other_ranks_here(self) -> list[int]:
        """Ranks other than this one with a checkpoint manifest in this directory: on a node
        directory (one per node, core.kubernetes.recovery_manifests), a sign that ranks moved
        between nodes (torchrun's rendezvous orders them anew at every start)."""
        if not self.root.is_dir():
            return []
        ranks = set()
        for child in self.root.iterdir():
            if STEP_DIR.fullmatch(child.name) and child.is_dir():
                for manifest in child.glob("rank_*.json"):
                    number = manifest.name[len("rank_"):-len(".json")]
                    if number.isdigit() and int(number) != self.rank:
                        ranks.add(int(number))
        return sorted(ranks)

    def is_complete(self, step: int) -> bool:
        """True when the manifest exists and the file matches it; warns about what is not."""
        data_path, manifest_path = rank_files(self.root, step, self.rank)
        where = f"checkpoint {data_path}"
        try:
            manifest = json.loads(manifest_path.read_text())
        except FileNotFoundError:
            warn(f"{where} has no manifest (half-written): skipped")
            return False
        except (OSError, ValueError):
            warn(f"{where}: its manifest is unreadable: skipped")
            return False
        if not data_path.exists():
            warn(f"{where} is missing although its manifest exists: skipped")
            return False
        size = data_path.stat().st_size
        if size != manifest.get("bytes") or _sha256(data_path) != manifest.get("sha256"):
            warn(f"{where} is truncated or corrupt ({size} bytes, manifest says "
                 f"{manifest.get('bytes')}): skipped")
            return False
        try:  # mmap: only the structure is read, the tensors' bytes stay on disk
            safe_load(data_path, mmap=True)
        except CheckpointRefused as exc:
            warn(f"{where} is refused: {exc}: skipped")
            return False
        return True

    def newest_complete(self) -> int | None:
        """The newest complete step of this rank: on disk, or (when newer) on the hub or among the
        workspace's W&B artifacts (each checked as it is fetched, then again here)."""
        best = next((s for s in reversed(self.steps_on_disk()) if self.is_complete(s)), None)
        for step in reversed(self.hub.steps(self.rank)) if self.hub is not None else ():
            if best is not None and step <= best:
                break
            if self.hub.download(self.root, self.rank, step) and self.is_complete(step):
                best = step
                break
        if self.artifacts is not None:
            step = self.artifacts.restore(self.root, self.rank, best, _weights_only_problem)
            if step is not None and self.is_complete(step):
                best = step
        return best

    def complete_steps(self) -> list[int]:
        return [s for s in self.steps_on_disk() if self.is_complete(s)]

    def load(self, step: int) -> dict:
        """The checkpoint of `step`, read from the same open file whose sha256 matched its manifest's;
        CheckpointRefused (one line) when it does not."""
        data_path, manifest_path = rank_files(self.root, step, self.rank)
        try:
            expected = json.loads(manifest_path.read_text()).get("sha256")
        except (OSError, ValueError, AttributeError):
            expected = None
        with open(data_path, "rb") as fh:
            if expected is None or _sha256_of(fh) != expected:
                raise CheckpointRefused(f"checkpoint {data_path} does not match the sha256 in its manifest "
                                        f"{manifest_path.name} (changed since it was checked): not loaded; "
                                        f"remove {data_path.parent.name} to resume from an older checkpoint")
            fh.seek(0)
            return safe_load(fh)

    def wait(self) -> None:
        if self.hub is not None:
            self.hub.wait()


class HubMirror:
    """Uploads each rank's checkpoint (file, then manifest) to an HF repo in the background,
    and downloads newer complete ones from it on start."""

    def __init__(self, repo: str) -> None:
        from huggingface_hub import HfApi

        self.repo = repo
        self.api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None,
                         token=os.environ.get("HF_TOKEN"))
        self.thread: threading.Thread | None = None
        self.ready = False

    def _ensure_repo(self) -> None:
        if not self.ready:
            self.api.create_repo(self.repo, private=True, exist_ok=True)
            self.ready = True

    def upload(self, data_path: Path, manifest_path: Path, folder: str) -> None:
        self.wait()

        def work() -> None:
            try:
                self._ensure_repo()
                for path in (data_path, manifest_path):  # manifest last, as on disk
                    self.api.upload_file(path_or_fileobj=str(path), repo_id=self.repo,
                                         path_in_repo=f"checkpoints/{folder}/{path.name}",
                                         commit_message=f"checkpoint {folder} {path.name}")
            except Exception as exc:  # the local copy still exists; training goes on
                warn(f"upload of {data_path.name} to the HF Hub failed: {one_line(exc)}")

        self.thread = threading.Thread(target=work, name="hub-upload", daemon=True)
        self.thread.start()

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None

    def steps(self, rank: int) -> list[int]:
        """Steps for which the hub holds this rank's manifest (so its file was uploaded first)."""
        try:
            files = self.api.list_repo_files(self.repo)
        except Exception as exc:
            warn(f"cannot list the HF Hub repo {self.repo}: {one_line(exc)}")
            return []
        return sorted({int(m.group(1)) for f in files
                       if (m := re.fullmatch(rf"checkpoints/step_([0-9]{{8}})/rank_{rank}\.json", f))})

    def held_steps(self) -> list[int] | str:
        """Steps for which the hub holds any checkpoint file (any rank; a manifest or not): what a new
        run would mix its own into. A repo that does not exist holds none. A string: why the repo could
        not be listed (one line)."""
        from huggingface_hub.utils import GatedRepoError, RepositoryNotFoundError

        try:
            files = self.api.list_repo_files(self.repo)
        except GatedRepoError as exc:  # a RepositoryNotFoundError too, but the repo is there
            return one_line(exc)
        except RepositoryNotFoundError:
            return []
        except Exception as exc:
            return one_line(exc)
        return sorted({int(m.group(1)) for f in files if (m := re.fullmatch(r"checkpoints/step_([0-9]{8})/[^/]+", f))})

    def download(self, root: Path, rank: int, step: int) -> bool:
        """Copy one rank's checkpoint from the hub to disk, file first, manifest last, through a fresh
        directory beside them: never from the HF cache (see the module docstring), which
        huggingface_hub would otherwise copy from even into a local_dir."""
        data_path, manifest_path = rank_files(root, step, rank)
        data_path.parent.mkdir(parents=True, exist_ok=True)
        fresh = Path(tempfile.mkdtemp(prefix=".hub-", dir=root))
        try:
            for path in (data_path, manifest_path):
                got = self.api.hf_hub_download(self.repo, f"checkpoints/{path.parent.name}/{path.name}",
                                               local_dir=fresh, cache_dir=fresh / "cache", force_download=True)
                os.replace(got, path)
            return True
        except Exception as exc:
            warn(f"download of step {step} from the HF Hub failed: {one_line(exc)}")
            return False
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
