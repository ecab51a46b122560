"""Results kept: a workspace's checkpoints, metrics, logs and resolved config copied into a
directory of the user's (`geotrain workspaces export ID DIR`), and a new workspace seeded
from such a directory (`workspaces deploy --resume-from DIR`).

    DIR/geotrain-export.json   what this is: workspace, spec summary, steps, files (sha256)
    DIR/spec.yaml              the workspace spec (token references removed)
    DIR/config.yaml            the resolved detailed config the workers ran
    DIR/metrics.jsonl  DIR/history.jsonl  DIR/result.json  DIR/wandb_run.json
    DIR/logs/<worker>.log      DIR/checkpoints/step_NNNNNNNN/rank_R.{pt,json}  DIR/wandb/…

The export is written into a private sibling directory and renamed onto DIR in one step,
so DIR holds a whole export or nothing. Symlinks inside a workspace directory are never
followed (a process of the workspace could plant one pointing at ~/.ssh): they are skipped
and named in the manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import yaml

from core.backends.base import Backend
from core.domain.records import Workspace
from core.errors import GeotrainError, InvalidInput
from core.schema.user_files import read_user_file
from core.schema.yaml_loader import load_yaml
from core.state.no_follow import CHUNK, copy_plain_file, plain_dir, walk_files

MANIFEST = "geotrain-export.json"
# ASCII digits only: `\d` also takes other scripts' digits, which int() reads ("step_٠٠٠٠٠٩٩٩" is 999)
STEP_DIR = re.compile(r"step_([0-9]{8})")
RANK_FILE = re.compile(r"rank_([0-9]{1,6})\.(pt|json)")


@dataclass
class Inventory:
    """What a workspace holds on this machine: what an export keeps and a delete loses."""

    checkpoint_steps: list[int] = field(default_factory=list)
    checkpoint_bytes: int = 0
    log_bytes: int = 0
    last_step: int | None = None
    on_this_machine: bool = True

    def describe(self) -> str:
        if not self.on_this_machine:
            return "its logs, metrics and checkpoints (in its pods and their volume)"
        ckpt = (f"{len(self.checkpoint_steps)} checkpoint(s) ({human_bytes(self.checkpoint_bytes)},"
                f" newest at step {self.checkpoint_steps[-1]})" if self.checkpoint_steps else "no checkpoints")
        steps = f"{self.last_step} trained steps" if self.last_step is not None else "no logged steps"
        return f"{ckpt}, {steps}, {human_bytes(self.log_bytes)} of logs"


def human_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _write(dst: Path, data: bytes) -> tuple[int, str]:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(data)
    return len(data), hashlib.sha256(data).hexdigest()


# inventory -----------------------------------------------------------------------------
def checkpoint_steps(names: Iterable[str]) -> dict[int, set[int]]:
    """step -> ranks with a complete-looking pair (file and manifest) among relative names."""
    found: dict[int, dict[int, set[str]]] = {}
    for name in names:
        parts = name.split("/")
        if len(parts) != 2 or not STEP_DIR.fullmatch(parts[0]) or not RANK_FILE.fullmatch(parts[1]):
            continue
        rank, kind = RANK_FILE.fullmatch(parts[1]).groups()
        found.setdefault(int(parts[0][5:]), {}).setdefault(int(rank), set()).add(kind)
    return {step: {r for r, kinds in ranks.items() if kinds == {"pt", "json"}}
            for step, ranks in found.items()}


def inventory(backend: Backend, ws: Workspace) -> Inventory:
    inv = Inventory()
    files = backend.result_files(ws.id, ws.spec)
    if not files:  # pods: not counted here (that would mean reading every pod's volume)
        inv.on_this_machine = False
        return inv
    ckpt_root = files.get("checkpoints")
    if ckpt_root is not None:
        steps = checkpoint_steps(name for name, _ in walk_files(ckpt_root, [], anchor=_anchor(files)))
        inv.checkpoint_steps = sorted(s for s, ranks in steps.items() if ranks)
        inv.checkpoint_bytes = sum(p.size() for _, p in walk_files(ckpt_root, [], anchor=_anchor(files)))
    if files.get("logs") is not None:
        inv.log_bytes = sum(p.size() for _, p in walk_files(files["logs"], [], anchor=_anchor(files)))
    steps = [r["step"] for r in backend.metrics(ws.id) if isinstance(r.get("step"), int)]
    inv.last_step = max(steps) if steps else (inv.checkpoint_steps[-1] if inv.checkpoint_steps else None)
    return inv


def _anchor(files: dict[str, Path]) -> Path | None:
    """The run directory (where the app wrote config.yaml): no link is followed below it."""
    return files["config.yaml"].parent if "config.yaml" in files else None


# export --------------------------------------------------------------------------------
def check_destination(dest: Path) -> None:
    """DIR is new or an empty directory; never an earlier export, never a file. A missing
    parent is made (0700) when its own parent exists, whatever DIR is: the app's default
    ~/geotrain-exports/ID works on first use, and a typo two levels up is still refused."""
    if (dest / MANIFEST).exists() or (dest / MANIFEST).is_symlink():
        raise InvalidInput(f"{dest} already holds a geotrain export", "choose a new directory")
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise InvalidInput(f"{dest} is not a directory", "choose a new directory")
    if dest.exists() and any(dest.iterdir()):
        raise InvalidInput(f"{dest} is not empty", "choose a new or empty directory")
    if not dest.parent.is_dir() and (os.path.lexists(dest.parent) or not dest.parent.parent.is_dir()):
        raise InvalidInput(f"the folder {dest.parent} does not exist", "create it first or choose another")


def export_workspace(backend: Backend, ws: Workspace, dest: Path) -> dict:
    """Copy the workspace's results into `dest` (new or empty) at once; the manifest dict."""
    dest = Path(dest).expanduser().absolute()
    try:
        check_destination(dest)
        dest.parent.mkdir(mode=0o700, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    except OSError as exc:
        raise _not_written(dest, exc) from None
    try:
        manifest = _fill(backend, ws, staging)
        if dest.exists():
            dest.rmdir()  # empty (checked); rename needs it gone or empty
        os.rename(staging, dest)
        os.chmod(dest, 0o755 & ~_umask())
    except OSError as exc:  # no room, no permission, DIR filled meanwhile: one line, nothing left
        shutil.rmtree(staging, ignore_errors=True)
        raise _not_written(dest, exc) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def _not_written(dest: Path, exc: OSError) -> InvalidInput:
    return InvalidInput(f"cannot export to {dest}: {exc.strerror or exc}",
                        "choose another directory, or free space and try again")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fill(backend: Backend, ws: Workspace, out: Path) -> dict:
    files: dict[str, dict] = {}
    skipped: list[str] = []
    sources = backend.result_files(ws.id, ws.spec)
    anchor = _anchor(sources)
    for key, src in sources.items():
        if src.name == key and not plain_dir(src):  # a single file (config.yaml, metrics.jsonl …)
            if src.is_symlink():
                skipped.append(key)
            elif os.path.lexists(src):
                copied = copy_plain_file(src, out / key, anchor)
                if copied:
                    files[key] = {"bytes": copied[0], "sha256": copied[1]}
                else:
                    skipped.append(key)
            continue
        for name, path in walk_files(src, skipped, key + "/", anchor):
            copied = copy_plain_file(path, out / name)
            if copied:
                files[name] = {"bytes": copied[0], "sha256": copied[1]}
    if "logs" not in sources:  # pods: logs through the API
        by_worker: dict[str, list[str]] = {}
        for worker, line in backend.logs(ws.id, follow=False):
            by_worker.setdefault(worker, []).append(line)
        for worker, lines in by_worker.items():
            name = f"logs/{re.sub(r'[^A-Za-z0-9_.-]', '_', worker)}.log"
            size, digest = _write(out / name, ("\n".join(lines) + "\n").encode())
            files[name] = {"bytes": size, "sha256": digest}
    copied_elsewhere, not_copied = False, ""
    if "checkpoints" not in sources:  # pods: through the exec stream, while they run
        try:
            from_pods = backend.copy_checkpoints(ws.id, out / "checkpoints")
        except GeotrainError as exc:  # logs and metrics are still worth keeping; said loudly
            from_pods, not_copied = None, str(exc)
            shutil.rmtree(out / "checkpoints", ignore_errors=True)  # no part of a copy cut short
        if from_pods is None:
            not_copied = not_copied or "no pod of the workspace is running (copying needs a live container)"
        else:
            copied_elsewhere = True
            skipped += [f"checkpoints/{name}" for name in from_pods]
            for name, path in walk_files(out / "checkpoints", [], "checkpoints/"):
                files[name] = {"bytes": path.size(), "sha256": _sha256(path.path)}
    if "metrics.jsonl" not in sources:  # pods: read through the API (a local one skipped stays so)
        rows = backend.metrics(ws.id)
        if rows:
            size, digest = _write(out / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
            files["metrics.jsonl"] = {"bytes": size, "sha256": digest}
    if "config.yaml" not in files:
        size, digest = _write(out / "config.yaml", backend.plan(ws.id, ws.spec).config_yaml.encode())
        files["config.yaml"] = {"bytes": size, "sha256": digest}
    spec = ws.spec.to_dict()
    spec.pop("tokens", None)
    size, digest = _write(out / "spec.yaml", yaml.safe_dump(spec, sort_keys=False).encode())
    files["spec.yaml"] = {"bytes": size, "sha256": digest}
    steps = checkpoint_steps(n.removeprefix("checkpoints/") for n in files if n.startswith("checkpoints/"))
    manifest = {"format": 1, "workspace": ws.id, "cluster": ws.cluster, "model": ws.spec.model,
                "size": ws.spec.size, "preset": ws.spec.preset, "workers": ws.spec.workers,
                "steps": ws.spec.steps, "exported_at": time.time(),
                "checkpoint_steps": sorted(s for s, ranks in steps.items() if ranks),
                "checkpoints_copied": "checkpoints" in sources or copied_elsewhere,
                "checkpoints_not_copied": not_copied, "skipped": skipped, "files": files}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


# restore -------------------------------------------------------------------------------
@dataclass
class ExportedRun:
    """An export directory read back for `deploy --resume-from`."""

    root: Path
    manifest: dict
    spec_text: str
    step: int
    ranks: int


MAX_EXPORT_TEXT = 4 << 20  # geotrain-export.json and spec.yaml are small; a huge one is not ours
NOT_EXPORT_HINT = "pass a directory written by `geotrain workspaces export`"
# Where the old workspace kept checkpoints, and on which cluster, are not carried over: the new
# workspace writes into its own directory on the cluster named now (or in --config).
NOT_IMPORTED = ("cluster",)
NOT_IMPORTED_RECOVERY = ("checkpoint_dir",)


def _read_small(path: Path, what: str) -> str:
    try:
        info = os.lstat(path)
    except OSError:
        raise InvalidInput(f"{path.parent} is not a geotrain export (no {path.name})", NOT_EXPORT_HINT) from None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_EXPORT_TEXT:
        raise InvalidInput(f"{what} {path} is not a regular file under {MAX_EXPORT_TEXT >> 20} MiB",
                           NOT_EXPORT_HINT)
    return read_user_file(path, what, NOT_EXPORT_HINT)


def read_export(path: str | os.PathLike) -> ExportedRun:
    root = Path(path).expanduser()
    manifest_text = _read_small(root / MANIFEST, "the export manifest")
    try:
        manifest = json.loads(manifest_text)
    except (ValueError, RecursionError):
        manifest = None
    if not isinstance(manifest, dict):
        raise InvalidInput(f"{root / MANIFEST} is not a geotrain export manifest", NOT_EXPORT_HINT)
    spec = load_yaml(_read_small(root / "spec.yaml", "the exported spec"), f"{root}/spec.yaml")
    if not isinstance(spec, dict):
        raise InvalidInput(f"{root}/spec.yaml is not a YAML mapping", NOT_EXPORT_HINT)
    for key in NOT_IMPORTED:
        spec.pop(key, None)
    if isinstance(spec.get("recovery"), dict):
        spec["recovery"] = {k: v for k, v in spec["recovery"].items() if k not in NOT_IMPORTED_RECOVERY}
    spec_text = yaml.safe_dump(spec, sort_keys=False)
    names = [n for n, _ in walk_files(root / "checkpoints", [])]
    ranks_by_step = {s: r for s, r in checkpoint_steps(names).items() if r}
    if not ranks_by_step:
        raise InvalidInput(f"the export {root} holds no checkpoint",
                           "export a workspace after it saved one (checkpoint.every)")
    step = max(ranks_by_step)
    return ExportedRun(root, manifest, spec_text, step, len(ranks_by_step[step]))


def seed_checkpoints(export: ExportedRun, checkpoint_root: Path, out_dir: Path) -> list[Path]:
    """Copy the export's newest checkpoint (every rank) and its metrics into a new run; the
    files written (the caller removes them if the deploy fails). All or nothing."""
    checkpoint_root = Path(checkpoint_root)
    if checkpoint_root.is_dir() and any(checkpoint_root.iterdir()) or \
            (os.path.lexists(checkpoint_root) and not plain_dir(checkpoint_root)):
        raise InvalidInput(f"the checkpoint directory {checkpoint_root} is not empty",
                           "set recovery.checkpoint_dir to a new directory, or leave it unset")
    written: list[Path] = []
    try:
        for name, path in walk_files(export.root / "checkpoints", []):
            if name.startswith(f"step_{export.step:08d}/"):
                target = checkpoint_root / name
                if copy_plain_file(path, target) is None:
                    raise InvalidInput(f"cannot read {export.root / 'checkpoints' / name} of the export",
                                       "export the workspace again")
                written.append(target)
        metrics = export.root / "metrics.jsonl"
        if _plain_file(metrics) and copy_plain_file(metrics, out_dir / "metrics.jsonl"):
            written.append(out_dir / "metrics.jsonl")
    except OSError as exc:
        remove_seeded(written)
        raise InvalidInput(f"cannot seed the checkpoint into {checkpoint_root}: {exc.strerror or exc}",
                           "free space or choose another recovery.checkpoint_dir") from None
    except BaseException:
        remove_seeded(written)
        raise
    return written


def _plain_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def remove_seeded(files: Iterable[Path]) -> None:
    """Undo seed_checkpoints: its files, then the step directories left empty."""
    for file in files:
        try:
            file.unlink()
            file.parent.rmdir()
        except OSError:
            pass
