"""Start N ranks of `recipes.train` on this machine the way a local workspace does: one process
per rank with torchrun's environment, meeting in a FileStore in a private temporary directory
(recipes.private_store) and binding loopback, so that a benchmark opens no store that another
host could reach (torchrun --standalone's TCPStore listens on every interface and its c10d
rendezvous unpickles what a peer writes: issue 38).

Like torchrun with --max-restarts 0, the first rank to fail stops the others.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recipes.private_store import GROUP_STORE_ENV

POLL_S = 0.1
LOOPBACK = "lo0" if sys.platform == "darwin" else "lo"


def run_ranks(args: list[str], nproc: int, env: dict[str, str], cwd: Path,
              timeout: float | None = None, command: list[str] | None = None) -> subprocess.CompletedProcess:
    """`python -m recipes.train ARGS` (or `command`, e.g. a geotrain_loop script) on `nproc` ranks; the
    ranks' stdout and stderr, each concatenated in rank order, and the first failure's exit code
    (0 when all succeed)."""
    argv = command or [sys.executable, "-m", "recipes.train", *args]
    with tempfile.TemporaryDirectory(prefix="geotrain-bench-") as private:  # made 0700
        base = {**env, "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": "0",
                GROUP_STORE_ENV: str(Path(private) / "store"), "GLOO_SOCKET_IFNAME": LOOPBACK,
                "NCCL_SOCKET_IFNAME": LOOPBACK}
        outs = [tempfile.TemporaryFile(dir=private) for _ in range(2 * nproc)]
        procs = [subprocess.Popen(argv, cwd=cwd,
                                  env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
                                  stdin=subprocess.DEVNULL, stdout=outs[2 * r], stderr=outs[2 * r + 1])
                 for r in range(nproc)]
        code = _wait(procs, None if timeout is None else time.monotonic() + timeout)
        text = []
        for handle in outs:
            handle.seek(0)
            text.append(handle.read().decode("utf-8", "replace"))
            handle.close()
    return subprocess.CompletedProcess(args, code, "".join(text[0::2]), "".join(text[1::2]))


def _wait(procs: list[subprocess.Popen], deadline: float | None) -> int:
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed:
                return failed[0]
            if all(c == 0 for c in codes):
                return 0
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(procs[0].args, 0)
            time.sleep(POLL_S)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
