"""WAN what-if: per compression preset, the time per step, the WAN's share of it and GPU utilization.

Pure arithmetic (no torch), so the app can answer while a user fills the deploy
form. The model is the one `recipes/` implements: DDP all-reduces fp32 gradients
every step; DiLoCo exchanges a pseudo-gradient every H inner steps, by ring
all-reduce (fp32/bf16), a quantised reduce-scatter + all-gather (dense block codecs from 3
workers up) or all-gather of a quantized payload (sparse picks, DeMo, ultra's signs). A ring
moves at the pace of its slowest link, so the bottleneck of the network matrix
decides. With overlap, an exchange runs during the next H inner steps and only
the part longer than them is waited for.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from core.errors import InvalidInput

# Goodput of TCP over a shaped link as a share of its line rate (headers, ACKs
# sharing the link): DDP on the WAN bench moved 5.45 MB/s over a 50 Mbit/s (6.25 MB/s) tbf link.
DEFAULT_EFFICIENCY = 0.87
DEFAULT_TARGET = 0.95
# The fewest inner steps the planner suggests: on the natural-text bench at Adam beta1 0.9, with the
# presets' outer lr 0.5 / momentum 0.6, H = 4 ended further from DDP's loss (1.030x on seed 1) than H = 8 (1.013x,
# both seeds; recipes/bench/RESULTS.md).
H_FLOOR = 8
# When the planner lowers H for an overlapped exchange, the exchange may fill at most this share of
# the H steps of compute it hides behind: the model predicts 100% up to a full window, but on the WAN
# bench `low-overlap` measured 90% with the exchange filling ~84% of it (ranks wait for the slowest).
OVERLAP_FILL = 0.8
# What overlap costs, measured (recipes/README.md "Overlap with eager updates", finished models at issue 15's budgets,
# Adam beta1 0.9).
OVERLAP_LOSS = "3-9%"
OVERLAP_COST = (f"is not free: each exchange lands one outer step late, and on the natural-text bench overlapped "
                f"runs (DiLoCo presets) ended with {OVERLAP_LOSS} higher loss than the same runs waiting for each "
                "exchange, at equal steps")


@dataclass(frozen=True)
class Link:
    """One row of the network matrix; latency_ms is the round trip, as the wizard's probe measures it."""

    src: str
    dst: str
    latency_ms: float
    mbit_s: float


@dataclass(frozen=True)
class Network:
    """What a collective sees: how many workers, the slowest link and the longest latency."""

    workers: int
    mbit_s: float
    latency_ms: float

    @property
    def bytes_per_s(self) -> float:
        return self.mbit_s * 1e6 / 8


def bottleneck(links: Iterable[Link], workers: int | None = None) -> Network:
    """The ring's pace from a network matrix: slowest bandwidth, longest latency between distinct nodes."""
    links = [link for link in links if link.src != link.dst]
    nodes = {link.src for link in links} | {link.dst for link in links}
    count = workers if workers is not None else max(1, len(nodes))
    if count > 1 and not links:
        raise InvalidInput("the network matrix has no links between distinct nodes",
                           "measure the cluster's network or give a matrix file with --matrix")
    if not links:
        return Network(workers=count, mbit_s=math.inf, latency_ms=0.0)
    for link in links:
        if link.mbit_s is None or link.mbit_s <= 0:
            raise InvalidInput(f"link {link.src} -> {link.dst} has no usable bandwidth ({link.mbit_s!r} Mbit/s)",
                               "re-measure the network matrix or fix the matrix file")
    return Network(workers=count, mbit_s=min(link.mbit_s for link in links),
                   latency_ms=max(link.latency_ms or 0.0 for link in links))


@dataclass(frozen=True)
class Exchange:
    """What one synchronisation puts on the wire, per rank."""

    collective: str  # "all_reduce" | "all_gather" | "quantised_reduce" (recipes' flat exchange)
    payload_bytes: int  # this rank's buffer (all-reduce) or contribution (all-gather)

    def wire_bytes(self, workers: int) -> float:
        """Bytes a rank sends, counted as recipes/distributed.py counts them."""
        if workers <= 1:
            return 0.0
        if self._reduces(workers):
            return 2 * (workers - 1) * self.payload_bytes / workers
        return (workers - 1) * self.payload_bytes

    def _reduces(self, workers: int) -> bool:
        """A quantised reduce-scatter + all-gather from 3 workers up; at 2 the recipes all-gather
        (the same bytes: recipes/algorithms/exchange.py says why)."""
        return self.collective == "all_reduce" or (self.collective == "quantised_reduce" and workers >= 3)

    def rounds(self, workers: int) -> int:
        """Latency-bound steps of the ring."""
        if workers <= 1:
            return 0
        return 2 * (workers - 1) if self._reduces(workers) else workers - 1


def exchange_for(preset: dict[str, Any], params: int) -> Exchange:
    """The payload a preset sends for a model of `params` trainable values (mirrors recipes' codecs)."""
    bits, block = int(preset.get("bits", 32)), int(preset.get("block", 0) or 0)
    density, index_bits = float(preset.get("density", 1.0)), int(preset.get("index_bits", 0) or 0)
    if preset.get("algorithm") == "ddp" or (bits >= 16 and not block and density >= 1.0):
        return Exchange("all_reduce", params * bits // 8)
    values = math.ceil(params * density) if density < 1.0 else params
    data = math.ceil(values * bits / 8)  # the last block's padding is not sent
    if block:
        data += 4 * math.ceil(values / block)  # one fp32 scale per block
    # a dense block codec (with or without error feedback: ultra too, since the recipe protocol) goes through
    # the quantised reduce-scatter + all-gather; sparse picks (density < 1, DeMo's indices) all-gather
    dense = block and density >= 1.0 and not index_bits
    return Exchange("quantised_reduce" if dense else "all_gather", data + math.ceil(values * index_bits / 8))


@dataclass(frozen=True)
class Estimate:
    """One preset on one network: seconds per training step and where they go."""

    preset: str
    algorithm: str
    inner_steps: int
    wire_bytes_per_sync: float
    sync_s: float  # one exchange on the wire
    step_s: float  # per step, exchange waited for in full
    wan_share: float  # of step_s
    utilization: float  # compute / step_s
    step_s_overlap: float  # per step with the overlapped outer sync (DiLoCo only)
    utilization_overlap: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sync_seconds(exchange: Exchange, net: Network, efficiency: float = DEFAULT_EFFICIENCY) -> float:
    if net.workers <= 1 or math.isinf(net.mbit_s):
        return 0.0
    transfer = exchange.wire_bytes(net.workers) / (net.bytes_per_s * efficiency)
    # each ring round waits for one hop: half a round trip
    return transfer + exchange.rounds(net.workers) * net.latency_ms / 2000


def hierarchical(exchange: Exchange) -> Exchange:
    """Between datacenters, a quantised payload is reduce-scattered then all-gathered (decoded,
    summed, re-quantised), not all-gathered whole: 2(K-1)/K of one payload per datacenter."""
    return Exchange("all_reduce", exchange.payload_bytes)


def h_for_utilization(sync_s: float, compute_s: float, target: float, overlap: bool = False) -> int:
    """The fewest inner steps H at which one exchange of `sync_s` seconds keeps utilization at
    `target` or above: waited for in full, compute / (compute + sync / H) >= target; overlapped,
    only the part of the exchange longer than H steps of compute is waited for, so H >= target * sync /
    compute, and to keep a margin the exchange fills at most OVERLAP_FILL of them: H >= sync / (0.8 compute)."""
    if sync_s <= 0:
        return 1
    if overlap:  # and the exchange fills at most OVERLAP_FILL of the window it overlaps
        need = max(target, 1 / OVERLAP_FILL) * sync_s / compute_s
    elif target < 1:
        need = sync_s / (compute_s * (1 / target - 1))
    else:
        return 0  # waited for in full, an exchange always costs something: no H reaches 100%
    return max(1, math.ceil(need - 1e-9))


def estimate(name: str, preset: dict[str, Any], params: int, compute_s: float, net: Network,
             efficiency: float = DEFAULT_EFFICIENCY, between_datacenters: bool = False) -> Estimate:
    """Time per step of `preset` when one step's compute takes `compute_s` seconds; with
    `between_datacenters`, `net.workers` are datacenters exchanging hierarchically."""
    if compute_s <= 0:
        raise InvalidInput(f"step time must be positive, not {compute_s}", "pass --step-time SECONDS (> 0)")
    exchange = exchange_for(preset, params)
    if between_datacenters:
        exchange = hierarchical(exchange)
    h = 1 if preset.get("algorithm") == "ddp" else max(1, int(preset.get("inner_steps", 1)))
    sync = sync_seconds(exchange, net, efficiency)
    step = compute_s + sync / h
    # Overlapped: the exchange runs during the next H steps; only its excess is waited for.
    step_overlap = step if h == 1 else compute_s + max(0.0, sync - h * compute_s) / h
    return Estimate(preset=name, algorithm=str(preset.get("algorithm")), inner_steps=h,
                    wire_bytes_per_sync=exchange.wire_bytes(net.workers), sync_s=sync, step_s=step,
                    wan_share=(step - compute_s) / step, utilization=compute_s / step,
                    step_s_overlap=step_overlap, utilization_overlap=compute_s / step_overlap)


@dataclass
class Plan:
    """Every preset's estimate and the recommendation, ready for a table or the deploy form."""

    network: Network
    params: int
    compute_s: float
    target: float
    estimates: list[Estimate] = field(default_factory=list)
    recommended: str | None = None
    overlap: bool = False
    reaches_target: bool = False
    inner_steps: int | None = None  # H to run the recommended DiLoCo preset with (None: DDP)
    streams: Any = None  # core.planner.streams.StreamsAssumed: the parallel streams the rates assume
    figures: Any = None  # core.planner.measured_links.Figures: measured by `clusters check`, or estimated

    def as_dict(self) -> dict[str, Any]:
        return {"network": asdict(self.network), "params": self.params, "compute_s": self.compute_s,
                "streams": asdict(self.streams) if self.streams is not None else None,
                "figures": self.figures.as_dict() if self.figures is not None else None,
                "target_utilization": self.target, "recommended": self.recommended, "overlap": self.overlap,
                "reaches_target": self.reaches_target, "inner_steps": self.inner_steps,
                "utilization_at_inner_steps": self.utilization(), "overlap_note": self.overlap_note(),
                "presets": [e.as_dict() for e in self.estimates]}

    def recommended_estimate(self) -> Estimate | None:
        return next((e for e in self.estimates if e.preset == self.recommended), None)

    def tuned(self) -> bool:
        """The recommended preset runs with fewer inner steps than its own H."""
        best = self.recommended_estimate()
        return best is not None and self.inner_steps is not None and self.inner_steps != best.inner_steps

    def overlap_note(self) -> str:
        """When overlap is recommended: what it costs in loss, and the utilization without it."""
        best = self.recommended_estimate()
        if best is None or not self.overlap:
            return ""
        h = self.inner_steps or best.inner_steps

        def without(steps: int) -> str:
            return f"~{self.utilization_at(best, steps, overlap=False):.0%} at H={steps}"
        own = f", {without(best.inner_steps)} (the preset's own H)" if h != best.inner_steps else ""
        return f"overlap {OVERLAP_COST}; without it: GPU utilization {without(h)}{own}"

    def summary(self) -> str:
        """One line for the deploy form."""
        best = self.recommended_estimate()
        if best is None:
            return "no preset to recommend"
        util = self.utilization()
        how = " with overlap" if self.overlap else ""
        if self.tuned():
            how = f" at H={self.inner_steps} (diloco.inner_steps: {self.inner_steps}){how}"
        verdict = "" if self.reaches_target else f" (below the {self.target:.0%} target)"
        return f"preset {best.preset}{how}: ~{util:.0%} GPU utilization{verdict}"

    def utilization(self) -> float | None:
        """The recommended preset's utilization at the recommended H and mode."""
        best = self.recommended_estimate()
        if best is None:
            return None
        if self.tuned():
            return self.utilization_at(best, self.inner_steps)
        return best.utilization_overlap if self.overlap else best.utilization

    def utilization_at(self, e: Estimate, h: int, overlap: bool | None = None) -> float:
        """`e`'s utilization with H inner steps instead of its own (in the recommended mode, or `overlap`'s)."""
        compute = self.compute_s
        wait = max(0.0, e.sync_s - h * compute) if (self.overlap if overlap is None else overlap) else e.sync_s
        return compute / (compute + wait / h)


def plan(presets: dict[str, dict[str, Any]], params: int, compute_s: float, net: Network,
         target: float = DEFAULT_TARGET, efficiency: float = DEFAULT_EFFICIENCY,
         between_datacenters: bool = False) -> Plan:
    """Estimate every preset (table order = least to most compression) and pick the least compressed
    one that reaches `target` utilization, preferring no overlap; else the best there is. For a
    DiLoCo pick, `inner_steps` is the fewest inner steps (not under H_FLOOR, not over the preset's
    own H) that still reach the target: on natural text, fewer inner steps reach DDP's loss in fewer
    steps (recipes/README.md), so a link with room to spare buys loss with it."""
    if params <= 0:
        raise InvalidInput(f"parameter count must be positive, not {params}", "pass --params N")
    if not 0 < target <= 1:
        raise InvalidInput(f"target utilization must be in (0, 1], not {target}", "e.g. --target 0.95")
    result = Plan(network=net, params=params, compute_s=compute_s, target=target)
    result.estimates = [estimate(name, p, params, compute_s, net, efficiency, between_datacenters)
                        for name, p in presets.items()]
    for e in result.estimates:
        for overlap in (False, True):
            if (e.utilization_overlap if overlap else e.utilization) >= target:
                result.recommended, result.overlap, result.reaches_target = e.preset, overlap, True
                result.inner_steps = _fewest_inner_steps(e, compute_s, target, overlap)
                return result
    best = max(result.estimates, key=lambda e: (e.utilization_overlap, -result.estimates.index(e)))
    result.recommended, result.overlap = best.preset, best.utilization_overlap > best.utilization
    result.inner_steps = None if best.algorithm == "ddp" else best.inner_steps
    return result


def _fewest_inner_steps(e: Estimate, compute_s: float, target: float, overlap: bool) -> int | None:
    if e.algorithm == "ddp":
        return None
    need = h_for_utilization(e.sync_s, compute_s, target, overlap)
    return e.inner_steps if need == 0 else min(e.inner_steps, max(H_FLOOR, need))
