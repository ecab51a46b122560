"""`clusters check local`: this machine as one node. A rank per GPU (two on a CPU-only machine, so
that there is a collective to time) runs recipes.cluster_check, meeting in a FileStore in a private
temporary directory on loopback as a local workspace does (no port another host could reach);
nvidia-smi or rocm-smi and the kernel log give the GPUs' ECC counters and Xids where present."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from core.backends.local.private_stores import GROUP_STORE_ENV, loopback_env
from core.domain.check_results import judge, parse_rank_line
from core.domain.gpu_health import (NVIDIA_HEALTH_COMMAND, ROCM_HEALTH_COMMAND, parse_nvidia_health,
                                    parse_rocm_health, parse_xids)
from core.domain.recipe_catalog import recipe_env
from core.errors import BackendError

TOOL_TIMEOUT_S = 30


def _tool(argv: list[str]) -> str:
    """A tool's stdout ('' when it is absent, fails or hangs): its figures are extra, not required."""
    if shutil.which(argv[0]) is None:
        return ""
    try:
        return subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=TOOL_TIMEOUT_S,
                              stdin=subprocess.DEVNULL).stdout[:1 << 20]
    except (OSError, subprocess.TimeoutExpired):
        return ""


def gpu_health() -> tuple[list[dict], list[dict]]:
    """(this machine's GPUs with ECC and temperature, the kernel log's Xids)."""
    nvidia = parse_nvidia_health(_tool(NVIDIA_HEALTH_COMMAND))
    if nvidia:  # the NVIDIA driver's Xids are in the kernel log (dmesg may need privileges: then none read)
        return nvidia, parse_xids(_tool(["dmesg"]))
    return parse_rocm_health(_tool(ROCM_HEALTH_COMMAND)), []


def run_ranks(ranks: int, seconds: float, payload_bytes: int, timeout: float) -> tuple[list[dict], str]:
    """Each rank's parsed result, and the output of any that failed (for the one-line error)."""
    with tempfile.TemporaryDirectory(prefix="geotrain-check-") as private:  # 0700
        env = {**recipe_env(), **loopback_env(), GROUP_STORE_ENV: str(Path(private) / "store"),
               "WORLD_SIZE": str(ranks), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        argv = [sys.executable, "-m", "recipes.cluster_check", "--seconds", str(seconds),
                "--payload-bytes", str(payload_bytes)]
        procs = [subprocess.Popen(argv, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, cwd=private,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, errors="replace") for r in range(ranks)]
        results, failed = [], ""
        try:
            for proc in procs:
                out, _ = proc.communicate(timeout=timeout)
                lines = [parsed for line in out.splitlines() if (parsed := parse_rank_line(line))]
                results += lines[:1]
                if proc.returncode != 0 and not failed:
                    failed = (out.strip().splitlines() or [f"exit code {proc.returncode}"])[-1][:200]
        except subprocess.TimeoutExpired:
            failed = f"a rank did not finish within {timeout:.0f} s"
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    return results, failed


def check_local(seconds: float, payload_bytes: int, ranks: int | None = None) -> dict:
    gpus, xids = gpu_health()
    ranks = ranks or max(2, len(gpus))
    results, failed = run_ranks(ranks, seconds, payload_bytes, timeout=4 * seconds + 240)
    if not results:
        raise BackendError(f"the check's ranks gave no result ({failed or 'no output'})",
                           "see that `python -m recipes.cluster_check --help` runs here (torch installed)")
    verdict = judge("local", "local", results, gpus, xids, ranks)
    if failed:
        verdict["nodes"][0]["why"].append(f"a rank failed: {failed}")
        verdict["nodes"][0]["ok"] = verdict["ok"] = False
    return verdict
