"""`clusters check` results, pure: each rank's line read strictly (a rank's output is not trusted),
and the node and link verdicts with why (core.domain.gpu_health for the GPUs' side)."""

from __future__ import annotations

import json
import math
import time

from core.domain.gpu_health import SLOW_SHARE, datasheet_flops, gpu_problems
from core.domain.terminal_text import printable

PREFIX = "geotrain-check "  # recipes.cluster_check.PREFIX
MAX_LINE = 8192


def _number(value, low: float = 0, high: float = 1e21) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and low <= value <= high


def parse_rank_line(line: str) -> dict | None:
    """A rank's `geotrain-check {json}` line with the fields the verdict reads, or None."""
    if not line.startswith(PREFIX) or len(line) > MAX_LINE:
        return None
    try:
        data = json.loads(line[len(PREFIX):])
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    matmul, memory, reduce = (data.get(k) if isinstance(data.get(k), dict) else {} for k in ("matmul", "memory", "all_reduce"))
    checks = [_number(data.get("rank"), 0, 1 << 20), isinstance(data.get("device"), str), _number(matmul.get("flops")),
              _number(memory.get("errors"), 0, 1 << 50), _number(memory.get("tested_bytes"), 0, 1 << 50),
              _number(reduce.get("bytes"), 1, 1 << 40), _number(reduce.get("seconds"), 1e-9, 3600),
              _number(reduce.get("busbw")), _number(reduce.get("world"), 1, 1 << 20)]
    if not all(checks):
        return None
    return {"rank": int(data["rank"]), "device": printable(data["device"])[:80], "matmul_flops": float(matmul["flops"]),
            "memory_tested": int(memory["tested_bytes"]), "memory_errors": int(memory["errors"]),
            "reduce_bytes": int(reduce["bytes"]), "reduce_seconds": float(reduce["seconds"]),
            "busbw": float(reduce["busbw"]), "world": int(reduce["world"]),
            "backend": printable(str(reduce.get("backend", "")))[:16]}


def _device(rank: dict) -> dict:
    expected = datasheet_flops(rank["device"])
    why = []
    if expected and rank["matmul_flops"] < SLOW_SHARE * expected:
        why.append(f"rank {rank['rank']}'s matmul at {rank['matmul_flops'] / 1e12:.0f} TFLOP/s is below "
                   f"{SLOW_SHARE:.0%} of the {rank['device']}'s datasheet {expected / 1e12:.0f}")
    if rank["memory_errors"]:
        why.append(f"rank {rank['rank']}'s memory test read back {rank['memory_errors']} wrong bytes")
    return {**rank, "expected_flops": expected, "ok": not why, "why": why}


def judge(cluster: str, node: str, ranks: list[dict], gpus: list[dict], xids: list[dict], ranks_started: int,
          at: float | None = None) -> dict:
    """The node's verdict (every rank's device, its GPUs' ECC and Xids) and the link between its ranks."""
    devices = [_device(r) for r in sorted(ranks, key=lambda r: r["rank"])]
    why = [w for d in devices for w in d["why"]] + gpu_problems(gpus, xids)
    if len(ranks) < ranks_started:
        why.append(f"{ranks_started - len(ranks)} of {ranks_started} ranks gave no result")
    links = []
    if len(ranks) >= 2:
        slowest = min(ranks, key=lambda r: r["busbw"])
        links.append({"name": f"{node}: {len(ranks)} ranks ({slowest['backend']})", "bytes": slowest["reduce_bytes"],
                      "seconds": slowest["reduce_seconds"], "busbw": slowest["busbw"], "world": slowest["world"]})
    return {"cluster": cluster, "checked_at": time.time() if at is None else at, "ok": not why,
            "nodes": [{"name": node, "ok": not why, "why": why, "devices": devices, "gpus": gpus, "xids": xids}],
            "links": links}
