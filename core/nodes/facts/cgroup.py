"""The cgroup hierarchy the node booted with: the filesystem type of /sys/fs/cgroup is
cgroup2fs under cgroup v2 and tmpfs under v1 or hybrid (Kubernetes docs, "About cgroup v2":
`stat -fc %T /sys/fs/cgroup/`). Kubernetes 1.35's kubelet refuses a v1 host unless told
otherwise (KEP-5573; core.bootstrap.k3s)."""

from __future__ import annotations

COMMAND = "stat -fc %T /sys/fs/cgroup"


def parse(output: str) -> dict:
    kind = output.strip().splitlines()[0].strip() if output.strip() else ""
    return {"version": 2 if kind == "cgroup2fs" else 1 if kind == "tmpfs" else None}
