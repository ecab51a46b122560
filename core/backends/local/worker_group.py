"""A fixed group of workers on this machine (DDP, one worker, hierarchical DiLoCo): what
`torchrun --standalone` did, without its TCPStore and c10d rendezvous (which listen on
every interface and unpickle what a peer writes; see private_stores).

The supervisor starts one `recipes.train` process per rank with torchrun's environment
(RANK, WORLD_SIZE, ...) and a FileStore in the run's private directory; like torchrun
with --max-restarts 0, the first worker to fail stops the rest, and the supervisor
decides whether the group comes back.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

from core.backends.local.kept_failures import keep_failure, log_size
from core.backends.local.private_stores import GROUP_STORE_ENV, store_file
from core.backends.local.run_history import RunHistory
from core.domain.line_splitter import LineSplitter
from core.state.atomic_files import write_atomically
from core.state.secret_store import redact

POLL_S = 0.2
READ_CHUNK = 64 * 1024
STOP_GRACE_S = 10


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def pump_output(name: str, proc: subprocess.Popen, log_dir: Path, history: RunHistory,
                secrets: list[str]) -> None:
    """Copy a worker's output to logs/<name>.log line by line (tokens redacted) and hand each
    line to the run history. Draining never stops, or the worker would block on a full pipe;
    it reads in bounded chunks, so a worker that writes gigabytes without a newline costs one
    cut line (LineSplitter), not the supervisor's memory."""
    assert proc.stdout is not None
    stream = getattr(proc.stdout, "buffer", proc.stdout)  # the bytes under a text-mode pipe
    splitter = LineSplitter()
    with open(log_dir / f"{name}.log", "a", buffering=1) as log:
        while True:
            chunk = stream.read1(READ_CHUNK)
            lines = splitter.feed(chunk) if chunk else splitter.flush()
            for raw in lines:
                line = redact(raw, secrets)
                log.write(line + "\n")
                try:
                    history.worker_line(name, line)
                except Exception as exc:  # a line the history cannot take is still logged
                    log.write(f"(geotrain: this line was not read as an event: {type(exc).__name__})\n")
            if not chunk:
                return


def write_pids(run_dir: Path, pids: dict[str, int]) -> None:
    """workers.json: rank -> pid of each live worker process (for people and tests)."""
    write_atomically(run_dir / "workers.json", json.dumps(pids))


class WorkerGroup:
    """One attempt of the group: start every rank, wait until all end or one fails."""

    def __init__(self, run_dir: Path, launch: dict, env: dict[str, str], history: RunHistory,
                 secrets: list[str], attempt: int) -> None:
        self.run_dir, self.launch, self.history, self.secrets = run_dir, launch, history, secrets
        self.workers = int(launch["workers"])
        store = store_file(run_dir, f"group-{attempt}")
        self.env = {k: v for k, v in env.items()
                    if k not in ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE")}
        self.env.update({"WORLD_SIZE": str(self.workers), "LOCAL_WORLD_SIZE": str(self.workers),
                         "GROUP_RANK": "0", "TORCHELASTIC_RESTART_COUNT": str(attempt),
                         GROUP_STORE_ENV: str(store),
                         "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1")})
        self.procs: dict[int, subprocess.Popen] = {}
        self.attempt = attempt
        self.failed: tuple[int, int] | None = None  # (rank, exit code) of the first to fail

    def run(self) -> tuple[int, str]:
        """(exit code, the first failure as 'worker-N exited with code C'; '' on success)."""
        threads = []
        since = {rank: log_size(self.run_dir, f"worker-{rank}") for rank in range(self.workers)}
        for rank in range(self.workers):
            # a custom-training command runs in the directory its user named (launch["cwd"])
            proc = subprocess.Popen(self.launch["worker_argv"], cwd=self.launch.get("cwd") or self.run_dir,
                                    env=dict(self.env, RANK=str(rank), LOCAL_RANK=str(rank)),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace")
            self.procs[rank] = proc
            thread = threading.Thread(target=pump_output, daemon=True, args=(
                f"worker-{rank}", proc, self.run_dir / "logs", self.history, self.secrets))
            thread.start()
            threads.append(thread)
        write_pids(self.run_dir, {str(r): p.pid for r, p in self.procs.items()})
        code, failure = self._watch()
        for thread in threads:
            thread.join(timeout=5)
        if self.failed is not None and self.launch.get("keep_failed"):  # recovery.keep_failed_pods
            rank, failed_code = self.failed
            keep_failure(self.run_dir, f"worker-{rank}", since[rank], failed_code, describe_exit(failed_code),
                         self.procs[rank].pid, self.attempt)
        return code, failure

    def _watch(self) -> tuple[int, str]:
        while True:
            codes = {rank: proc.poll() for rank, proc in self.procs.items()}
            failed = sorted((r, c) for r, c in codes.items() if c not in (None, 0))
            if failed:
                rank, code = self.failed = failed[0]
                self._stop()
                return code, f"worker-{rank} {describe_exit(code)}"
            if all(c == 0 for c in codes.values()):
                return 0, ""
            time.sleep(POLL_S)

    def _stop(self) -> None:
        live = [p for p in self.procs.values() if p.poll() is None]
        for proc in live:
            proc.terminate()
        deadline = time.time() + STOP_GRACE_S
        for proc in live:
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
