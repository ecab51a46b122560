"""Training algorithms: DDP, DiLoCo (fp32/bf16/fp8/fp4 exchanges), DiLoCo + DeMo."""

from __future__ import annotations

import torch

from recipes.algorithms.ddp import DDP
from recipes.algorithms.demo import DemoExchange, sign_outer_step
from recipes.algorithms.diloco import DiLoCo
from recipes.algorithms.exchange import FullPrecisionExchange, QuantizedExchange
from recipes.algorithms.hierarchical import HierarchicalDiLoCo, HierarchicalExchange
from recipes.algorithms.streaming import StreamingDiLoCo
from recipes.config import Compression
from recipes.schema import TrainConfig
from recipes.topology import TopologyError
from recipes.distributed import Wire


def build_algorithm(model: torch.nn.Module, comp: Compression, cfg: TrainConfig, wire: Wire, lan: Wire | None = None,
                    elastic: bool = False):
    """The algorithm a resolved preset asks for, wired to `wire` for byte counting; with `lan`
    (a datacenter's group), hierarchical DiLoCo with `wire` the WAN group (recipes.algorithms.hierarchical).
    A preset's fragments give way (the model syncs whole) with diloco.overlap, across datacenters and in
    elastic mode (its quorum routes one outer step, not a fragment's); explicit ones are refused there."""
    if comp.density < 1.0 and (comp.algorithm != "diloco" or comp.bits in (32, 16)):
        raise ValueError(f"diloco.density {comp.density:g} needs a DiLoCo exchange of 8, 4 or 1 bits (the preset "
                         f"sends {comp.bits}-bit {comp.algorithm}); set diloco.bits or diloco.density=1")
    if comp.density < 1.0 and not comp.error_feedback:
        raise ValueError(f"diloco.density {comp.density:g} needs error feedback (what a sync does not send waits "
                         f"there), and the {comp.preset} preset has it off: set diloco.error_feedback=true")
    if comp.algorithm == "ddp":
        return DDP(model, wire)
    numel = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if lan is not None:
        return _hierarchical(model, comp, cfg, wire, lan, numel)
    if comp.algorithm == "diloco" and comp.fragments > 1:
        if cfg.diloco.overlap:
            _whole_model(comp, cfg, ValueError("diloco.overlap is not available with diloco.fragments > 1 (fragments "
                                               "already spread the exchange over the H steps); set one of them"))
        elif elastic:
            _whole_model(comp, cfg, ValueError("diloco.fragments is not available in elastic mode (its quorum routes "
                                               "whole outer steps): set diloco.fragments=1"))
        else:
            return _streaming(model, comp, cfg, wire)
    if comp.algorithm == "demo":
        exchange = DemoExchange(numel, comp.chunk, comp.topk, cfg.demo.decay, wire, value_bits=comp.bits if comp.bits in (4, 1) else 8,
                                value_block=comp.block or 128, transform=cfg.demo.transform)
    else:
        exchange = _diloco_exchange(numel, comp, cfg, wire)
    algo = DiLoCo(model, exchange, inner_steps=comp.inner_steps, outer_lr=comp.outer_lr,
                  outer_momentum=comp.outer_momentum, overlap=cfg.diloco.overlap,
                  overlap_momentum=comp.overlap_momentum, flush_bits=cfg.diloco.flush_bits, final_step=cfg.steps)
    if comp.algorithm == "demo":
        algo.name = "demo"
        if cfg.demo.sign_step:
            algo.outer_update = lambda avg: sign_outer_step(algo.global_flat, avg, cfg.demo.sign_lr)
    return algo


def _whole_model(comp: Compression, cfg: TrainConfig, refusal: Exception) -> None:
    """Where the model can only sync whole: a preset's fragments give way (the caller builds plain or
    hierarchical DiLoCo), an explicit diloco.fragments above 1 is refused with `refusal`."""
    if comp.fragments > 1 and cfg.diloco.fragments is not None:
        raise refusal


def _diloco_exchange(numel: int, comp: Compression, cfg: TrainConfig, wire: Wire):
    """fp32/bf16 all-reduced (summable on the wire), or the preset's quantised codec all-gathered."""
    if comp.bits in (32, 16):
        return FullPrecisionExchange(numel, comp.bits, wire)
    return QuantizedExchange(numel, comp.bits, comp.block, wire, comp.error_feedback,
                             density=comp.density, seed=cfg.seed, rotate=comp.rotate)


def _streaming(model: torch.nn.Module, comp: Compression, cfg: TrainConfig, wire: Wire) -> StreamingDiLoCo:
    """Streaming DiLoCo: one exchange of the preset's format per fragment."""
    return StreamingDiLoCo(model, lambda numel: _diloco_exchange(numel, comp, cfg, wire), fragments=comp.fragments, inner_steps=comp.inner_steps,
                           outer_lr=comp.outer_lr, outer_momentum=comp.outer_momentum,
                           flush_bits=cfg.diloco.flush_bits, final_step=cfg.steps)


def _hierarchical(model, comp: Compression, cfg: TrainConfig, wan: Wire, lan: Wire, numel: int):
    if comp.algorithm == "demo":
        raise TopologyError("DeMo has no exchange between datacenters: use a diloco preset, or datacenters: 1")
    _whole_model(comp, cfg, TopologyError("diloco.fragments is not available across datacenters yet: set "
                                          "diloco.fragments=1, or datacenters: 1"))
    if comp.density < 1.0:
        raise TopologyError("diloco.density is not available across datacenters yet: set diloco.density=1, "
                            "or datacenters: 1")
    twin = lan.twins[0] if cfg.diloco.overlap and lan.twins else None  # made by groups(overlap=True)
    if cfg.diloco.overlap and twin is None:
        raise TopologyError("diloco.overlap across datacenters needs the LAN groups made with overlap=True")
    exchange = HierarchicalExchange(numel, comp.bits, comp.block or 128, lan, wan, comp.error_feedback,
                                    lan_exchange=twin, rotate=comp.rotate)
    return HierarchicalDiLoCo(model, exchange, inner_steps=comp.inner_steps, outer_lr=comp.outer_lr,
                              outer_momentum=comp.outer_momentum, overlap=cfg.diloco.overlap,
                              overlap_momentum=comp.overlap_momentum, final_step=cfg.steps)
