"""Recovery settings of a workspace (the spec's `recovery:` mapping): where checkpoints
live, how many automatic recoveries it gets, and how long elastic DiLoCo waits for a
missing worker. Backends turn them into worker environment and job policies.

    recovery:
      max_recoveries: 3          # automatic restarts before the workspace is FAILED
      elastic: true              # DiLoCo goes on without a lost worker (DDP restarts the group)
      join_timeout_s: 60         # longest wait for an alive but late worker at an outer step
      heartbeat_timeout_s: 5     # a worker silent this long is not waited for
      op_timeout_s: 30           # bound on one outer-step collective
      standby: true              # local elastic pool: keep one warm spare worker for fast restarts
      checkpoint_dir: /data/ckpt # local: a directory on this machine (default: the run dir)
      host_path: /srv/geotrain   # kubernetes: a directory on each node; each workspace
                                 #   mounts only <host_path>/<job> (clusters without Pod Security)
      pvc: my-claim              # kubernetes: an existing claim; each workspace mounts its sub-path
      storage_class: fast-rwx    # kubernetes: class of the per-workspace claim made by default
      hf_repo: me/run-ckpts      # HF Hub copy of record (needs an HF token)
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from core.errors import FieldError

ALGORITHMS_THAT_STAY_UP = ("diloco", "demo")
# A node directory a pod may write into must not be (or be inside) one the system or the
# cluster runs from: a pod writing there could replace binaries, cron jobs or kubelet state.
SYSTEM_DIRS = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot",
               "/dev", "/proc", "/sys", "/run", "/var/run", "/root", "/var/lib/kubelet",
               "/var/lib/rancher", "/var/lib/containerd", "/var/lib/docker")
TOP_LEVEL_ONLY = ("/", "/home", "/var", "/var/lib", "/tmp", "/opt", "/srv", "/mnt", "/media")
# DNS-1123 subdomain: names of claims and storage classes
# (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-subdomain-names).
K8S_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass
class RecoverySettings:
    max_recoveries: int = 3
    elastic: bool = True
    join_timeout_s: float = 60.0
    heartbeat_timeout_s: float = 5.0
    op_timeout_s: float = 30.0
    standby: bool = True
    checkpoint_dir: str | None = None
    host_path: str | None = None
    pvc: str | None = None
    storage_class: str | None = None
    hf_repo: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> "RecoverySettings":
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise FieldError("recovery", "a mapping of recovery settings", type(data).__name__,
                             "write e.g. `recovery: {max_recoveries: 3}`")
        known = {f.name: f for f in fields(cls)}
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                raise FieldError(f"recovery.{key}", f"one of {', '.join(known)}", "an unknown key",
                                 "remove or rename the key")
            out[key] = _check(key, value, cls.__dataclass_fields__[key].default)
        if out.get("host_path") and out.get("pvc"):
            raise FieldError("recovery.pvc", "either host_path or pvc", "both",
                             "keep one of recovery.host_path and recovery.pvc")
        return cls(**out)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def is_elastic(self, algorithm: str, workers: int) -> bool:
        """DiLoCo with several workers keeps going without a lost one; DDP restarts the group."""
        return self.elastic and workers > 1 and algorithm in ALGORITHMS_THAT_STAY_UP

    def worker_env(self, checkpoint_dir: str | None) -> dict[str, str]:
        """Environment recipes.checkpoint_store and recipes.elastic read."""
        env = {"GEOTRAIN_ELASTIC_JOIN_TIMEOUT_S": str(self.join_timeout_s),
               "GEOTRAIN_ELASTIC_HEARTBEAT_TIMEOUT_S": str(self.heartbeat_timeout_s),
               "GEOTRAIN_ELASTIC_OP_TIMEOUT_S": str(self.op_timeout_s)}
        if checkpoint_dir:
            env["GEOTRAIN_CHECKPOINT_DIR"] = checkpoint_dir
        if self.hf_repo:
            env["GEOTRAIN_CHECKPOINT_HF_REPO"] = self.hf_repo
        return env


def _check(key: str, value: Any, default: Any) -> Any:
    path = f"recovery.{key}"
    if key == "max_recoveries":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise FieldError(path, "a whole number ≥ 0", value, "e.g. max_recoveries: 3")
        return value
    if key in ("elastic", "standby"):
        if not isinstance(value, bool):
            raise FieldError(path, "true or false", value, f"write {key}: true or {key}: false")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86400:
            raise FieldError(path, "seconds, more than 0 and at most 86400", value, f"e.g. {key}: {default:g}")
        return float(value)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise FieldError(path, "a non-empty string", value, f"give {key} a name or remove it")
    if key in ("checkpoint_dir", "host_path") and not value.startswith("/"):
        raise FieldError(path, "an absolute path", value, "start the path with /")
    if key == "host_path":
        return check_host_path(value)
    if key in ("pvc", "storage_class") and (len(value) > 253 or not K8S_SUBDOMAIN.fullmatch(value)):
        raise FieldError(path, "a Kubernetes name (lower-case letters, digits, '-' and '.')", value,
                         f"e.g. {key}: {'my-claim' if key == 'pvc' else 'local-path'}")
    return value


def check_host_path(value: str) -> str:
    """A node directory for checkpoints: absolute, normalised, and not a system directory."""
    path = "recovery.host_path"
    if any(ord(c) < 32 or ord(c) == 127 for c in value) or len(value) > 1024:
        raise FieldError(path, "a plain path (no control characters, at most 1024 characters)",
                         value[:80], "e.g. host_path: /srv/geotrain")
    if ".." in value.split("/") or posixpath.normpath(value) != value or value.startswith("//"):
        raise FieldError(path, "a normalised path (no '..', '.', '//' or trailing '/')", value,
                         "write the directory's plain absolute path, e.g. /srv/geotrain")
    if value in TOP_LEVEL_ONLY or any(value == d or value.startswith(d + "/") for d in SYSTEM_DIRS):
        raise FieldError(path, "a directory of its own, not a system directory", value,
                         "use a dedicated directory such as /srv/geotrain")
    return value
