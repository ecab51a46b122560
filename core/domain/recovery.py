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
      wandb_artifacts: true      # W&B artifacts as a copy of record (the run's project; needs a W&B key online)
      keep_failed_pods: true     # a failed pod (kubernetes) or worker's log and exit (local) stays for a look
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Any, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, ValidationError, model_validator

from core.errors import FieldError
from recipes.schema import HF_REPO_ID
from core.schema.field_errors import first_field_error

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


def _named(value: str) -> str:
    if not value.strip():
        raise ValueError("empty")
    return value


def _hf_repo(value: str) -> str:
    if not re.fullmatch(HF_REPO_ID, value):
        raise ValueError("not an HF Hub repo id")
    return value


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("relative")
    return value


def _host_path(value: str) -> str:
    return check_host_path(value)


def _kubernetes_name(value: str) -> str:
    if len(value) > 253 or not K8S_SUBDOMAIN.fullmatch(value):
        raise ValueError("not a Kubernetes name")
    return value


Seconds = Annotated[float, Strict(), Field(gt=0, le=86400)]
Named = Annotated[str, Strict(), AfterValidator(_named)]
AbsolutePath = Annotated[Named, AfterValidator(_absolute)]
NodeDirectory = Annotated[AbsolutePath, AfterValidator(_host_path)]
KubernetesName = Annotated[Named, AfterValidator(_kubernetes_name)]


class RecoverySettings(BaseModel):
    """A workspace's `recovery:` mapping, checked; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    max_recoveries: Annotated[int, Strict()] = Field(3, ge=0)
    """Automatic restarts before the workspace is FAILED."""
    elastic: Annotated[bool, Strict()] = True
    """DiLoCo goes on without a lost worker (DDP restarts the group)."""
    join_timeout_s: Seconds = 60.0
    """Longest wait for an alive but late worker at an outer step."""
    heartbeat_timeout_s: Seconds = 5.0
    """A worker silent this long is not waited for."""
    op_timeout_s: Seconds = 30.0
    """Bound on one outer-step collective."""
    standby: Annotated[bool, Strict()] = True
    """Local elastic pool: keep one warm spare worker for fast restarts."""
    checkpoint_dir: Optional[AbsolutePath] = None
    """Local: a directory on this machine (default: the run dir)."""
    host_path: Optional[NodeDirectory] = None
    """Kubernetes: a directory on each node; each workspace mounts only <host_path>/<job>."""
    pvc: Optional[KubernetesName] = None
    """Kubernetes: an existing claim; each workspace mounts only its sub-path."""
    storage_class: Optional[KubernetesName] = None
    """Kubernetes: class of the per-workspace claim made by default (ReadWriteMany for several pods)."""
    hf_repo: Optional[Annotated[Named, AfterValidator(_hf_repo)]] = None
    """HF Hub copy of record (needs an HF token): a repo id, name or namespace/name."""
    wandb_artifacts: Annotated[bool, Strict()] = False
    """W&B artifacts as a copy of record: rank 0's checkpoints saved to the run's project, the newest
    complete one restored on start, checked against its manifest's sha256 (recipes.wandb_artifacts)."""
    keep_failed_pods: Annotated[bool, Strict()] = False
    """Keep what failed for a look: on Kubernetes a failed pod stays (no job restart deletes it, a
    crashed trainer is not restarted in place; the workspace waits for you); locally each failed
    worker's own log and exit are kept under kept/ in the run directory."""

    @model_validator(mode="after")
    def _one_checkpoint_volume(self) -> "RecoverySettings":
        if self.host_path and self.pvc:
            raise FieldError("recovery.pvc", "either host_path or pvc", "both",
                             "keep one of recovery.host_path and recovery.pvc")
        return self

    @classmethod
    def from_dict(cls, data: Any) -> "RecoverySettings":
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise FieldError("recovery", "a mapping of recovery settings", type(data).__name__,
                             "write e.g. `recovery: {max_recoveries: 3}`")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise first_field_error(exc, cls, "recovery.", _EXPECTED, _hints()) from None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)

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
        if self.wandb_artifacts:
            env["GEOTRAIN_CHECKPOINT_WANDB_ARTIFACTS"] = "1"
        return env


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


_SECONDS = "seconds, more than 0 and at most 86400"
_EXPECTED = {"max_recoveries": "a whole number ≥ 0", "elastic": "true or false", "standby": "true or false",
             "keep_failed_pods": "true or false", "wandb_artifacts": "true or false",
             "join_timeout_s": _SECONDS, "heartbeat_timeout_s": _SECONDS, "op_timeout_s": _SECONDS,
             "checkpoint_dir": "an absolute path", "host_path": "an absolute path",
             "pvc": "a Kubernetes name (lower-case letters, digits, '-' and '.')",
             "storage_class": "a Kubernetes name (lower-case letters, digits, '-' and '.')",
             "hf_repo": "an HF Hub repo id (name or namespace/name: letters, digits, '.', '_', '-')"}


def _hints() -> dict[str, str]:
    """What to write instead, per key (the defaults are the examples)."""
    defaults = RecoverySettings()
    hints = {"max_recoveries": "e.g. max_recoveries: 3", "checkpoint_dir": "start the path with /",
             "host_path": "start the path with /", "pvc": "e.g. pvc: my-claim",
             "storage_class": "e.g. storage_class: local-path",
             "hf_repo": "e.g. hf_repo: me/run-ckpts, or remove it"}
    for key in ("elastic", "standby", "keep_failed_pods", "wandb_artifacts"):
        hints[key] = f"write {key}: true or {key}: false"
    for key in ("join_timeout_s", "heartbeat_timeout_s", "op_timeout_s"):
        hints[key] = f"e.g. {key}: {getattr(defaults, key):g}"
    return hints
