"""Merging a cluster's stored kubeconfig into ~/.kube/config: backed up, never overwritten silently.

Entries (cluster, user, context) named after the cluster are added; if entries of that
name exist with other content, the merge stops unless `force`, and a backup of the
file is always written before any change.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import yaml

from core.bootstrap.kubeconfig import write_private
from core.bootstrap.kubeconfig_checks import SECTIONS, entries
from core.state.atomic_files import write_atomically
from core.state.cluster_records import get_cluster
from core.errors import InvalidInput, NotFound
from core.state.store import Store
from core.schema.yaml_loader import MalformedYaml, load_yaml

def default_path() -> Path:
    return Path("~/.kube/config").expanduser()


def _load(path: Path, what: str) -> dict:
    try:
        data = load_yaml(path.read_bytes().decode("utf-8"), f"{what} {path}") or {}
    except UnicodeDecodeError:
        raise InvalidInput(f"{what} {path} is not UTF-8 text", "fix or move the file") from None
    except MalformedYaml as exc:
        raise InvalidInput(f"{what} {path} is not valid YAML ({exc.problem})",
                           "fix or move the file and try again") from None
    except OSError as exc:
        raise InvalidInput(f"cannot read {what} {path}: {exc.strerror}",
                           "fix or move the file") from None
    for section in SECTIONS:
        entries(data, section, f"{what} {path}")
    return data


@contextmanager
def _kubectl_lock(path: Path):
    """The lock kubectl takes (`<file>.lock`, created O_EXCL; client-go
    tools/clientcmd/loader.go lockFile), so neither writes over the other."""
    lock = path.with_name(path.name + ".lock")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        raise InvalidInput(f"{lock} exists: kubectl or another geotrain is writing {path}",
                           f"retry in a moment; if nothing is writing it, delete {lock}") from None
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def merge(cluster: str, target: Path | None = None, force: bool = False,
          store: Store | None = None) -> str:
    """Merge; returns a one-line account of what happened (backup path included)."""
    record = get_cluster(store or Store(), cluster)
    if not record.kubeconfig_path or not Path(record.kubeconfig_path).is_file():
        raise NotFound(f"cluster {cluster!r} has no stored kubeconfig yet",
                       f"deploy it first: geotrain clusters deploy {cluster} --nodes …")
    ours = _load(Path(record.kubeconfig_path), "stored kubeconfig")
    path = Path(target).expanduser() if target else default_path()
    # kubectl locks the path it was given, the link or its target; a symlinked
    # ~/.kube/config (dotfiles) is written through: its target is replaced
    real = path.resolve() if path.is_symlink() else path
    with _kubectl_lock(path), (_kubectl_lock(real) if real != path else nullcontext()):
        return _merge_locked(cluster, ours, real, force)


def _merge_locked(cluster: str, ours: dict, path: Path, force: bool) -> str:
    theirs = _load(path, "kubeconfig") if path.exists() else {
        "apiVersion": "v1", "kind": "Config", "preferences": {}}
    clashes, same = [], True
    for section in SECTIONS:
        mine = {e["name"]: e for e in ours.get(section) or []}
        for entry in theirs.get(section) or []:
            if entry.get("name") in mine:
                same = same and entry == mine[entry["name"]]
                if entry != mine[entry["name"]]:
                    clashes.append(f"{section[:-1]} {entry['name']!r}")
    present = all(any(e.get("name") == cluster for e in theirs.get(s) or []) for s in SECTIONS)
    if present and same:
        return f"{path} already has cluster {cluster!r}: nothing to do"
    if clashes and not force:
        raise InvalidInput(f"{path} already has a different {', '.join(clashes)}",
                           "pass --force to replace them (a backup is written first)")
    backup = None
    if path.exists():
        stamp = time.strftime('%Y%m%d-%H%M%S')
        backup = path.with_name(f"{path.name}.backup-{stamp}")
        count = 1
        while backup.exists():  # never replace an earlier backup
            count += 1
            backup = path.with_name(f"{path.name}.backup-{stamp}-{count}")
        write_atomically(backup, path.read_bytes())  # credentials: 0600 from creation
    for section in SECTIONS:
        mine = ours.get(section) or []
        names = {e["name"] for e in mine}
        theirs[section] = [e for e in theirs.get(section) or [] if e.get("name") not in names] + mine
    theirs.setdefault("current-context", cluster)
    write_private(path, yaml.safe_dump(theirs, sort_keys=False))
    saved = f" (backup: {backup})" if backup else ""
    return f"merged cluster {cluster!r} into {path}{saved}; use it: kubectl --context {cluster}"
