"""Elastic DiLoCo on this machine: one process per worker (no torchrun group, which would
restart everyone when one dies) plus the TCPStore they meet in (recipes.elastic_store).

A spare worker (recipes.standby) waits with torch and the model already imported, so
a lost worker is replaced in about a second. The pool restarts a worker that died, on its own, while the others keep training; it
rejoins at the next outer step. When every worker is gone at once (as a lost node would
do), the whole pool comes back in a new generation and resumes from the newest
checkpoint. Each recovery spends one unit of the retry budget.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from core.backends.local.run_history import RunHistory
from core.state.atomic_files import write_atomically
from core.state.secret_store import redact

POLL_S = 0.2
SETTLE_S = 0.5  # failures this close together are one event (a node loss kills all at once)
STORE_WAIT_S = 180


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class WorkerPool:
    def __init__(self, run_dir: Path, launch: dict, env: dict[str, str], history: RunHistory,
                 secrets: list[str] | None = None) -> None:
        self.run_dir, self.launch, self.env, self.history = run_dir, launch, env, history
        self.secrets = secrets or []
        self.workers = int(launch["workers"])
        self.budget = int(launch.get("max_recoveries", 0))
        self.used = recoveries_used(run_dir, launch)
        self.generation = 0
        self.store: subprocess.Popen | None = None
        self.store_address = ""
        self.procs: dict[int, subprocess.Popen] = {}
        self.incarnation = {i: 0 for i in range(self.workers)}
        self.done: set[int] = set()
        self.stopping = False
        self.spare: subprocess.Popen | None = None
        self.use_spare = bool(launch.get("standby", True))

    # processes ----------------------------------------------------------------
    def _start_store(self) -> None:
        port_file = self.run_dir / "elastic_store.port"
        port_file.unlink(missing_ok=True)
        with open(self.run_dir / "logs" / "elastic-store.log", "ab") as log:
            self.store = subprocess.Popen(
                [sys.executable, "-m", "recipes.elastic_store", "--host", "127.0.0.1",
                 "--port", "0", "--port-file", str(port_file)],
                cwd=self.run_dir, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.time() + STORE_WAIT_S
        while not port_file.exists():
            if self.store.poll() is not None or time.time() > deadline:
                raise RuntimeError("the elastic store did not start; see logs/elastic-store.log")
            time.sleep(0.1)
        self.store_address = f"127.0.0.1:{port_file.read_text().strip()}"

    def _worker_env(self, rank: int) -> dict[str, str]:
        return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(self.workers),
                "LOCAL_WORLD_SIZE": str(self.workers), "GEOTRAIN_ELASTIC_STORE": self.store_address,
                "GEOTRAIN_ELASTIC_GEN": str(self.generation),
                "TORCHELASTIC_RESTART_COUNT": str(self.incarnation[rank])}

    def _start_worker(self, rank: int) -> None:
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
        threading.Thread(target=self._pump, args=(rank, proc), daemon=True).start()
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
        write_atomically(self.run_dir / "workers.json", json.dumps(pids))

    def _pump(self, rank: int, proc: subprocess.Popen) -> None:
        name = f"worker-{rank}"
        assert proc.stdout is not None
        with open(self.run_dir / "logs" / f"{name}.log", "a", buffering=1) as log:
            for raw in proc.stdout:
                line = redact(raw.rstrip("\n"), self.secrets)
                log.write(line + "\n")
                self.history.worker_line(name, line)

    def stop(self) -> None:
        self.stopping = True
        live = [p for p in [*self.procs.values(), self.spare] if p is not None and p.poll() is None]
        live += [self.store] if self.store is not None and self.store.poll() is None else []
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
        self._start_store()
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
        alive = [r for r, p in self.procs.items() if p.poll() is None]
        store_lost = self.store is not None and self.store.poll() is not None
        whole = store_lost or (not alive and not self.done)
        names = [f"worker-{r}" for r in sorted(failed)]
        cause = "; ".join(f"worker-{r} {describe_exit(c)}" for r, c in sorted(failed.items()))
        if store_lost:
            cause = "the elastic store process exited; " + cause
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
            if store_lost:
                self._start_store()
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

