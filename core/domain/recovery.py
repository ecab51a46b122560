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
      host_path: /var/lib/geotrain/checkpoints   # kubernetes: a directory on each node
      pvc: my-claim              # kubernetes: a PersistentVolumeClaim (shared by the pods)
      hf_repo: me/run-ckpts      # HF Hub copy of record (needs an HF token)
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, ValidationError, model_validator

from core.errors import FieldError
from core.schema.field_errors import first_field_error

ALGORITHMS_THAT_STAY_UP = ("diloco", "demo")


def _named(value: str) -> str:
    if not value.strip():
        raise ValueError("empty")
    return value


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("relative")
    return value


Seconds = Annotated[float, Strict(), Field(gt=0, le=86400)]
Named = Annotated[str, Strict(), AfterValidator(_named)]
AbsolutePath = Annotated[Named, AfterValidator(_absolute)]


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
    host_path: Optional[AbsolutePath] = None
    """Kubernetes: a directory on each node."""
    pvc: Optional[Named] = None
    """Kubernetes: a PersistentVolumeClaim (shared by the pods)."""
    hf_repo: Optional[Named] = None
    """HF Hub copy of record (needs an HF token)."""

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
        return env


_SECONDS = "seconds, more than 0 and at most 86400"
_EXPECTED = {"max_recoveries": "a whole number ≥ 0", "elastic": "true or false", "standby": "true or false",
             "join_timeout_s": _SECONDS, "heartbeat_timeout_s": _SECONDS, "op_timeout_s": _SECONDS,
             "checkpoint_dir": "an absolute path", "host_path": "an absolute path",
             "pvc": "a non-empty string", "hf_repo": "a non-empty string"}


def _hints() -> dict[str, str]:
    """What to write instead, per key (the defaults are the examples)."""
    defaults = RecoverySettings()
    hints = {"max_recoveries": "e.g. max_recoveries: 3", "checkpoint_dir": "start the path with /",
             "host_path": "start the path with /", "pvc": "give pvc a name or remove it",
             "hf_repo": "give hf_repo a name or remove it"}
    for key in ("elastic", "standby"):
        hints[key] = f"write {key}: true or {key}: false"
    for key in ("join_timeout_s", "heartbeat_timeout_s", "op_timeout_s"):
        hints[key] = f"e.g. {key}: {getattr(defaults, key):g}"
    return hints
