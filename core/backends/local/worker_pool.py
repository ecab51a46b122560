"""Elastic DiLoCo on this machine: one process per worker (no torchrun group, which would
restart everyone when one dies), meeting in a FileStore in the run's private directory
(core.backends.local.private_stores: no port that another host or user could reach).

A spare worker (recipes.standby) waits with torch and the model already imported, so
a lost worker is replaced in about a second. The pool restarts a worker that died, on its own, while the others keep training; it
rejoins at the next outer step. When every worker is gone at once (as a lost node would
do), the whole pool comes back in a new generation and resumes from the newest
checkpoint. Each recovery spends one unit of the retry budget.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

from core.backends.local.kept_failures import keep_failure, log_size
from core.backends.local.private_stores import ELASTIC_STORE_ENV, store_file
from core.backends.local.run_history import RunHistory
from core.backends.local.worker_group import describe_exit, pump_output, write_pids

POLL_S = 0.2
SETTLE_S = 0.5  # failures this close together are one event (a node loss kills all at once)
__all__ = ["WorkerPool", "describe_exit", "pool_environment", "recoveries_used"]


class WorkerPool:
    def __init__(self, run_dir: Path, launch: dict, env: dict[str, str], history: RunHistory,
                 secrets: list[str] | None = None) -> None:
        self.run_dir, self.launch, self.env, self.history = run_dir, launch, env, history
        self.secrets = secrets or []
        self.workers = int(launch["workers"])
        self.budget = int(launch.get("max_recoveries", 0))
        self.used = recoveries_used(run_dir, launch)
        self.generation = 0
        self.store_path = ""
        self.procs: dict[int, subprocess.Popen] = {}
        self.incarnation = {i: 0 for i in range(self.workers)}
        self.done: set[int] = set()
        self.stopping = False
        self.spare: subprocess.Popen | None = None
        self.use_spare = bool(launch.get("standby", True))
        self.since: dict[int, int] = {}  # rank -> its log's size when its current process started

    # processes ----------------------------------------------------------------
    def _new_store(self) -> None:
        """A fresh store file per generation: a cold start sees none of the last one's keys."""
        self.store_path = str(store_file(self.run_dir, f"elastic-{self.generation}"))

    def _worker_env(self, rank: int) -> dict[str, str]:
        return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(self.workers),
                "LOCAL_WORLD_SIZE": str(self.workers), ELASTIC_STORE_ENV: self.store_path,
                "GEOTRAIN_ELASTIC_GEN": str(self.generation),
                "TORCHELASTIC_RESTART_COUNT": str(self.incarnation[rank])}

    def _start_worker(self, rank: int) -> None:
        self.since[rank] = log_size(self.run_dir, f"worker-{rank}")
        spare, self.spare = self.spare, None
        if spare is not None and spare.poll() is None:
            orders = {"env": self._worker_env(rank), "argv": self.launch["worker_argv"][-2:]}
            assert spare.stdin is not None
            spare.stdin.write(json.dumps(orders) + "\n")
            spare.stdin.close()
            proc = spare
        else:
            proc = subprocess.Popen(self.launch["worker_argv"], cwd=self.run_dir,
                                    env=dict(self.env, **self._worker_env(rank)),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace")
        self.procs[rank] = proc
        threading.Thread(target=pump_output, daemon=True, args=(
            f"worker-{rank}", proc, self.run_dir / "logs", self.history, self.secrets)).start()
        self._write_pids()

    def _start_spare(self) -> None:
        if self.use_spare and (self.spare is None or self.spare.poll() is not None):
            argv = [self.launch["worker_argv"][0], "-m", "recipes.standby",
                    *self.launch["worker_argv"][-2:]]
            self.spare = subprocess.Popen(argv, cwd=self.run_dir, env=self.env,
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, errors="replace")
            self._write_pids()

    def _write_pids(self) -> None:
        """workers.json: rank -> pid of the live process (for people and tests)."""
        pids = {str(r): p.pid for r, p in self.procs.items() if p.poll() is None}
        if self.spare is not None and self.spare.poll() is None:
            pids["spare"] = self.spare.pid
        write_pids(self.run_dir, pids)

    def stop(self) -> None:
        self.stopping = True
        live = [p for p in [*self.procs.values(), self.spare] if p is not None and p.poll() is None]
        for proc in live:
            proc.terminate()
        deadline = time.time() + 10
        for proc in live:
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()

    # the watch loop -----------------------------------------------------------
    def run(self) -> int:
        self._new_store()
        for rank in range(self.workers):
            self._start_worker(rank)
        self._start_spare()
        while not self.stopping:
            failed = self._failed()
            if failed:
                noticed = time.time()
                time.sleep(SETTLE_S)
                failed = self._failed()
                code = self._recover(failed, noticed)
                if code is not None:
                    self.stop()
                    return code
            if len(self.done) == self.workers:
                self.stop()
                return 0
            time.sleep(POLL_S)
        return 143

    def _failed(self) -> dict[int, int]:
        failed = {}
        for rank, proc in self.procs.items():
            code = proc.poll()
            if code == 0:
                self.done.add(rank)
            elif code is not None and rank not in self.done:
                failed[rank] = code
        return failed

    def _recover(self, failed: dict[int, int], noticed: float) -> int | None:
        """Restart what failed; the exit code to end with when the budget is spent."""
        if self.launch.get("keep_failed"):  # recovery.keep_failed_pods: each failed process's own output
            for rank, code in sorted(failed.items()):
                keep_failure(self.run_dir, f"worker-{rank}", self.since.get(rank, 0), code, describe_exit(code),
                             self.procs[rank].pid, self.incarnation[rank])
        alive = [r for r, p in self.procs.items() if p.poll() is None]
        whole = not alive and not self.done
        names = [f"worker-{r}" for r in sorted(failed)]
        cause = "; ".join(f"worker-{r} {describe_exit(c)}" for r, c in sorted(failed.items()))
        if self.used >= self.budget:
            self.history.add("gave_up", workers=names, cause=cause, budget=self.budget)
            return next(iter(failed.values())) if failed else 1
        self.used += 1
        self.history.failed(names, cause, self.used, self.budget, "group" if whole else "worker", noticed)
        restart = sorted(failed)
        if whole:
            self.generation += 1  # a fresh namespace in the store: a cold start from checkpoints
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            self._new_store()
            restart = [r for r in range(self.workers) if r not in self.done]
        for rank in restart:
            self.incarnation[rank] += 1
            self._start_worker(rank)
        self._start_spare()
        return None


def recoveries_used(run_dir: Path, launch: dict) -> int:
    """Recoveries already spent by earlier supervisors of this run and by the app's check."""
    from core.backends.local.run_history import read_history

    earlier = sum(r.get("kind") == "recovery" for r in read_history(run_dir))
    return earlier + int(launch.get("workspace_recoveries", 0))


def pool_environment(env: dict[str, str]) -> dict[str, str]:
    """torchrun would set these; a pool worker must not inherit a stale torchrun setup."""
    return {k: v for k, v in env.items()
            if k not in ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")} | {
        "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1")}

