"""Network matrix: latency and bandwidth for every ordered pair of nodes, over the mesh.

Transfers run one at a time (parallel flows would share the links and understate each
pair). Only pairs not yet measured are measured, so re-running a finished cluster
measures nothing; `--only netmatrix` (alone) measures every pair again.
"""

from __future__ import annotations

import json
import shlex
import threading

from core.bootstrap import paths_on_node
from core.bootstrap.plan import DeployContext, NodeTarget
from core.bootstrap.runner import Phase, Step
from core.bootstrap.session import StepFailed

SINK_PORT = 51821
_transfer_lock = threading.Lock()


def pairs_to_measure(ctx: DeployContext, alive: list[NodeTarget]) -> list[tuple[str, str]]:
    names = [t.name for t in alive]
    known = set() if ctx.shared.get("remeasure") else set(ctx.shared.get("measured", ()))
    return [(a, b) for a in names for b in names if a != b and (a, b) not in known]


def _select(ctx: DeployContext, alive: list[NodeTarget]) -> list[NodeTarget]:
    pairs = pairs_to_measure(ctx, alive)
    ctx.put_shared("netmatrix_pairs", pairs)
    involved = {n for pair in pairs for n in pair}
    return [t for t in alive if t.name in involved]


def _address(ctx: DeployContext, target: NodeTarget) -> str:
    """The node's mesh IP (or host), quoted: it goes on a remote command line."""
    return shlex.quote(ctx.plan.address(target.spec))


def _start_sink(ctx: DeployContext, target: NodeTarget) -> str | None:
    if not any(dst == target.name for _, dst in ctx.shared["netmatrix_pairs"]):
        return None
    probe = paths_on_node.ensure_netprobe(target)
    target.session.change(
        f"setsid -f {probe} sink {_address(ctx, target)} {SINK_PORT} --idle 30"
        " </dev/null >/dev/null 2>&1", what="starting the bandwidth sink")
    return "sink listening"


def _measure(ctx: DeployContext, target: NodeTarget) -> str | None:
    dsts = [dst for src, dst in ctx.shared["netmatrix_pairs"] if src == target.name]
    if not dsts:
        return None
    probe = paths_on_node.ensure_netprobe(target)
    rows = []
    for dst in dsts:
        address = _address(ctx, ctx.targets[dst])
        with _transfer_lock:
            result = target.session.fact(
                f"{probe} measure {address} {SINK_PORT} {ctx.plan.netmatrix_bytes}",
                timeout=120)
        if ctx.dry_run:
            continue
        if not result.ok:
            raise StepFailed(f"measuring {target.name} → {dst} failed: "
                             f"{(result.stderr.strip().splitlines() or ['no output'])[-1]}")
        data = json.loads(result.stdout.strip().splitlines()[-1])
        rows.append((target.name, dst, data["latency_ms"], data["mbit_s"]))
    with ctx.lock:
        ctx.shared.setdefault("netmatrix", []).extend(rows)
    return f"measured {len(rows)} pair(s)"


def _stop_sink(ctx: DeployContext, target: NodeTarget) -> None:
    if any(dst == target.name for _, dst in ctx.shared["netmatrix_pairs"]):
        target.session.change("pid=$(cat /run/geotrain/netprobe-sink.pid 2>/dev/null)"
                              " && kill $pid; true", what="stopping the sink")


STEP = Step("netmatrix", [Phase("sinks", _start_sink, _select), Phase("measure", _measure),
                          Phase("cleanup", _stop_sink)])
