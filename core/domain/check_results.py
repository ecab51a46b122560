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


def _line_data(line: str) -> dict | None:
    if not line.startswith(PREFIX) or len(line) > MAX_LINE:
        return None
    try:
        data = json.loads(line[len(PREFIX):])
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _section(data: dict, key: str) -> dict:
    return data.get(key) if isinstance(data.get(key), dict) else {}


def _device_fields(data: dict) -> dict | None:
    matmul, memory = _section(data, "matmul"), _section(data, "memory")
    if not all([_number(data.get("rank"), 0, 1 << 20), isinstance(data.get("device"), str), _number(matmul.get("flops")),
                _number(memory.get("errors"), 0, 1 << 50), _number(memory.get("tested_bytes"), 0, 1 << 50)]):
        return None
    return {"rank": int(data["rank"]), "device": printable(data["device"])[:80], "matmul_flops": float(matmul["flops"]),
            "memory_tested": int(memory["tested_bytes"]), "memory_errors": int(memory["errors"])}


def _reduce_fields(data: dict) -> dict | None:
    reduce = _section(data, "all_reduce")
    if not all([_number(data.get("rank"), 0, 1 << 20), _number(reduce.get("bytes"), 1, 1 << 40),
                _number(reduce.get("seconds"), 1e-9, 3600), _number(reduce.get("busbw")),
                _number(reduce.get("world"), 1, 1 << 20)]):
        return None
    return {"rank": int(data["rank"]), "reduce_bytes": int(reduce["bytes"]), "reduce_seconds": float(reduce["seconds"]),
            "busbw": float(reduce["busbw"]), "world": int(reduce["world"]),
            "backend": printable(str(reduce.get("backend", "")))[:16]}


def parse_rank_line(line: str) -> dict | None:
    """A rank's `geotrain-check {json}` line with the fields the verdict reads, or None."""
    data = _line_data(line)
    device = _device_fields(data) if data else None
    reduce = _reduce_fields(data) if device else None
    return {**device, **reduce} if reduce else None


def parse_device_line(line: str) -> dict | None:
    """A burn-in line (`recipes.cluster_check --devices`): device, matmul, memory; or None."""
    data = _line_data(line)
    return _device_fields(data) if data else None


def parse_link_line(line: str) -> dict | None:
    """A link rank's line (`recipes.cluster_check --link`): the all-reduce only; or None."""
    data = _line_data(line)
    return _reduce_fields(data) if data else None


def judge_device(rank: dict) -> dict:
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
    devices = [judge_device(r) for r in sorted(ranks, key=lambda r: r["rank"])]
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


def judge_node(cluster_node: str, devices: list[dict], gpus: list[dict], xids: list[dict],
               burn_in: str | None = None, failed: str | None = None) -> dict:
    """A cluster node's part of the check (over SSH or a pod): its devices' burn-in, its GPUs' ECC and
    Xids; `burn_in` says in one line why no burn-in ran (no torch there: not a failure of the node),
    `failed` why the node could not be checked at all (it fails)."""
    judged = [judge_device(d) for d in sorted(devices, key=lambda d: d["rank"])]
    why = [w for d in judged for w in d["why"]] + gpu_problems(gpus, xids) + ([failed] if failed else [])
    return {"name": cluster_node, "ok": not why, "why": why, "devices": judged, "gpus": gpus, "xids": xids,
            "burn_in": burn_in}
