"""Checkpoints as W&B artifacts: a copy of record beside the workspace's volume and the HF Hub
(`recovery.wandb_artifacts: true`; modelled on recipes.checkpoint_store.HubMirror).

Each rank's checkpoint of step S is one version of the artifact `<prefix>-rank<R>` (type
ARTIFACT_TYPE), aliased `step-<S>`, holding exactly `rank_R.pt` and `rank_R.json` (the manifest:
bytes and sha256) and the manifest as the version's metadata. On start the newest complete version
comes first: a version counts only when W&B says it is COMMITTED, its metadata names this rank
and a step, and it lists exactly those two files. Each is downloaded into a fresh directory in
this workspace's checkpoint directory (never a shared cache), and refused, one warning line,
when it holds any other file (a .pkl, a script: an artifact anyone with write access to the
project could plant), when its manifest disagrees with the metadata, when the .pt's sha256 does
not match, or when the .pt would build anything but tensors and data (the weights-only loader of
recipes.checkpoint_store); then the next older one is tried. Nothing in a refused file runs.

W&B itself is reached through the wandb library (WandbArtifacts); the mirror takes any object with
the same three methods, so tests run it against a local stand-in (W&B's server cannot run here).
Settings: GEOTRAIN_CHECKPOINT_WANDB_ARTIFACTS=1 (set by the backend from the recovery setting),
WANDB_PROJECT / WANDB_ENTITY (wandb's own), GEOTRAIN_WORKSPACE (the prefix).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Protocol

ARTIFACT_TYPE = "geotrain-checkpoint"
ENV = "GEOTRAIN_CHECKPOINT_WANDB_ARTIFACTS"
SHA256 = re.compile(r"[0-9a-f]{64}")
NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")  # W&B artifact names: letters, digits, '-', '_', '.'


class ArtifactBackend(Protocol):
    def publish(self, name: str, files: list[Path], metadata: dict, alias: str) -> None: ...
    def versions(self, name: str) -> list[dict]: ...  # {"version", "state", "metadata", "files"}
    def download(self, name: str, version: str, dest: Path) -> Path: ...


class WandbArtifacts:
    """W&B through the wandb library: the active run logs, the public API lists and downloads."""

    def __init__(self, project: str | None = None, entity: str | None = None) -> None:
        self.project = project or os.environ.get("WANDB_PROJECT") or "geotrain"
        self.entity = entity or os.environ.get("WANDB_ENTITY")

    def _path(self, name: str) -> str:
        return "/".join(p for p in (self.entity, self.project, name) if p)

    def publish(self, name: str, files: list[Path], metadata: dict, alias: str) -> None:
        import wandb

        if wandb.run is None:  # only rank 0 holds the run: its checkpoint carries the global weights
            return
        artifact = wandb.Artifact(name, type=ARTIFACT_TYPE, metadata=metadata)
        for path in files:  # the manifest last, as on disk
            artifact.add_file(str(path), name=path.name)
        wandb.run.log_artifact(artifact, aliases=[alias])

    def versions(self, name: str) -> list[dict]:
        import wandb

        found = []
        for artifact in wandb.Api().artifacts(ARTIFACT_TYPE, self._path(name)):
            found.append({"version": artifact.version, "state": artifact.state,
                          "metadata": dict(artifact.metadata or {}), "files": [f.name for f in artifact.files()]})
        return found

    def download(self, name: str, version: str, dest: Path) -> Path:
        import wandb

        artifact = wandb.Api().artifact(f"{self._path(name)}:{version}", type=ARTIFACT_TYPE)
        return Path(artifact.download(root=str(dest)))


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)  # recipes.checkpoint_store.warn's form


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class ArtifactMirror:
    """One workspace's checkpoints on W&B: save each rank's step, list, restore newest complete first."""

    def __init__(self, backend: ArtifactBackend, prefix: str) -> None:
        self.backend = backend
        self.prefix = NAME_UNSAFE.sub("-", prefix).strip("-.") or "geotrain"

    def name(self, rank: int) -> str:
        return f"{self.prefix}-rank{rank}"

    def save(self, data_path: Path, manifest_path: Path) -> bool:
        """Publish one rank's checkpoint (its manifest as metadata); False, with a warning, when W&B
        cannot take it now (the local copy stays; training goes on)."""
        from recipes.telemetry import one_line

        manifest = json.loads(manifest_path.read_text())
        try:
            self.backend.publish(self.name(manifest["rank"]), [data_path, manifest_path], manifest,
                                 f"step-{manifest['step']:08d}")
            return True
        except Exception as exc:  # noqa: BLE001 - W&B's own errors: reported, not fatal
            _warn(f"saving {data_path.name} of step {manifest['step']} as a W&B artifact failed: {one_line(exc)}")
            return False

    def listed(self, rank: int) -> list[tuple[int, str]]:
        """(step, version) of this rank's complete versions, newest step first. A version listing any
        file besides the two is refused here, before anything of it is downloaded (a planted file of
        any size would otherwise land on the node's disk first); what a download holds is checked again."""
        wanted = {f"rank_{rank}.pt", f"rank_{rank}.json"}
        found = []
        for entry in self.backend.versions(self.name(rank)):
            meta = entry.get("metadata") or {}
            step = meta.get("step")
            if not (entry.get("state") == "COMMITTED" and meta.get("rank") == rank and isinstance(step, int)
                    and not isinstance(step, bool) and step >= 0 and isinstance(meta.get("sha256"), str)
                    and SHA256.fullmatch(meta["sha256"]) and wanted <= set(entry.get("files") or [])):
                continue
            extra = sorted(set(entry["files"]) - wanted)
            if extra:
                _warn(f"W&B artifact {self.name(rank)}:{str(entry['version'])[:40]} (step {step}) is refused: it "
                      f"holds {', '.join(map(str, extra[:3]))[:200]}, not just {' and '.join(sorted(wanted))}: skipped")
                continue
            found.append((step, str(entry["version"])))
        return sorted(found, reverse=True)

    def restore(self, root: Path, rank: int, newer_than: int | None,
                loads: Callable[[Path], str | None]) -> int | None:
        """Put the newest complete, checked version (newer than `newer_than`) into `root` as
        recipes.checkpoint_store lays it out (step_<S>/rank_<R>.pt and .json); its step, or None when
        none passes. `loads(path)`: why the file may not be loaded (the weights-only check), or None."""
        for step, version in self.listed(rank):
            if newer_than is not None and step <= newer_than:
                return None
            root.mkdir(parents=True, exist_ok=True)
            fresh = Path(tempfile.mkdtemp(prefix=".wandb-", dir=root))
            where = f"W&B artifact {self.name(rank)}:{version} (step {step})"
            try:
                got = self.backend.download(self.name(rank), version, fresh)
                why = self._problem(got, rank, step) or loads(got / f"rank_{rank}.pt")
                if why:
                    _warn(f"{where} is refused: {why}: skipped")
                    continue
                folder = root / f"step_{step:08d}"
                data_path, manifest_path = folder / f"rank_{rank}.pt", folder / f"rank_{rank}.json"
                folder.mkdir(parents=True, exist_ok=True)
                os.replace(got / data_path.name, data_path)
                os.replace(got / manifest_path.name, manifest_path)  # last: marks it complete
                return step
            except Exception as exc:  # noqa: BLE001 - a download that fails: the next one
                from recipes.telemetry import one_line

                _warn(f"{where} could not be restored: {one_line(exc)}: skipped")
            finally:
                shutil.rmtree(fresh, ignore_errors=True)
        return None

    @staticmethod
    def _problem(folder: Path, rank: int, step: int) -> str | None:
        """Why a downloaded version is not this rank's checkpoint of `step` (None: it is)."""
        names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir())
        wanted = sorted((f"rank_{rank}.json", f"rank_{rank}.pt"))
        if names != wanted or any(p.is_symlink() for p in folder.rglob("*")):
            extra = sorted(set(names) - set(wanted)) or names
            return f"it holds {', '.join(extra[:3])[:200]}, not just {' and '.join(wanted)}"
        try:
            manifest = json.loads((folder / wanted[0]).read_text())
        except (OSError, ValueError):
            return "its manifest is unreadable"
        if not isinstance(manifest, dict) or manifest.get("step") != step or manifest.get("rank") != rank:
            return "its manifest names another step or rank"
        data = folder / wanted[1]
        if data.stat().st_size != manifest.get("bytes") or _sha256(data) != manifest.get("sha256"):
            return "the checkpoint does not match the sha256 in its manifest"
        return None


def mirror_from_env() -> ArtifactMirror | None:
    """The mirror the backend asked for (GEOTRAIN_CHECKPOINT_WANDB_ARTIFACTS=1), else None."""
    if os.environ.get(ENV) != "1":
        return None
    workspace = os.environ.get("GEOTRAIN_WORKSPACE")
    if not workspace:  # without it two workspaces' artifacts would share names: restore could take another's
        _warn("recovery.wandb_artifacts is set but GEOTRAIN_WORKSPACE is not: checkpoints stay off W&B")
        return None
    return ArtifactMirror(WandbArtifacts(), workspace)

