"""A `recipes.train` worker that also measures how long it waits on the network.

    torchrun ... -m recipes.bench.wan_worker --config C [overrides] 

It times every blocking torch.distributed call and every wait on an async one,
starts the clock at the first training step (after a barrier, so ranks start
together) and writes <out_dir>/wan_stats.rank<R>.json when training ends:
loop wall time, network wait, parameter count. Compute utilization is then
(loop - wait) / loop. It also registers the bench's model sizes `gpt-neo/wan` and `wan-wide`:
wide enough that a 50 Mbit/s link, not the CPU, bounds DDP — the regime of real
models across a WAN — yet a few seconds of CPU per method.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from pathlib import Path

import torch.distributed as dist

from recipes import catalog, train
from recipes.algorithms import hierarchical

BENCH_SIZES = {
    "wan": dict(hidden_size=128, num_layers=2, num_heads=4, vocab_size=256,
                max_position_embeddings=256, window_size=64),  # 0.46M params
    "wan-wide": dict(hidden_size=256, num_layers=2, num_heads=4, vocab_size=256,
                     max_position_embeddings=256, window_size=64),  # 1.71M params
}
for _name, _spec in BENCH_SIZES.items():
    catalog.MODEL_SIZES["gpt-neo"].setdefault(_name, _spec)

STATS = {"wait_s": 0.0, "lan_wait_s": 0.0, "loop_start": None, "loop_end": None, "params": 0, "calls": 0,
         "lan_bytes": 0}
LAN_GROUPS: list = []  # a datacenter's own group (hierarchical DiLoCo): its waits are not WAN waits


def _charge(seconds: float, kwargs: dict) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # an overlapped exchange's own thread: training goes on meanwhile (its wait is charged below)
    group = kwargs.get("group")
    STATS["lan_wait_s" if group is not None and any(group is g for g in LAN_GROUPS) else "wait_s"] += seconds


class TimedWork:
    """An async handle whose wait() is charged to the network."""

    def __init__(self, work, call_kwargs: dict) -> None:
        self._work, self._call = work, call_kwargs

    def wait(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            _charge(time.perf_counter() - start, self._call)

    def __getattr__(self, name):
        return getattr(self._work, name)


def timed(fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        STATS["calls"] += 1
        if kwargs.get("async_op") and result is not None:
            return TimedWork(result, kwargs)
        _charge(time.perf_counter() - start, kwargs)
        return result
    return call


def charged(method):
    @functools.wraps(method)
    def call(self):
        start = time.perf_counter()
        try:
            return method(self)
        finally:
            _charge(time.perf_counter() - start, {})
    return call


def install() -> None:
    for name in ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast",
                 "all_to_all_single"):
        setattr(dist, name, timed(getattr(dist, name)))
    for name in ("wait", "done"):  # where training waits for an overlapped exchange between datacenters
        setattr(hierarchical.BackgroundWork, name, charged(getattr(hierarchical.BackgroundWork, name)))
    first_step = train.Trainer.train_step
    evaluate = train.Trainer.evaluate

    def train_step(self):
        if STATS["loop_start"] is None:
            if dist.is_initialized():
                dist.barrier()
            STATS["params"] = sum(p.numel() for p in self.model.parameters())
            STATS["wait_s"] = STATS["lan_wait_s"] = 0.0
            if self.lan is not None:
                LAN_GROUPS.append(self.lan.group)
            STATS["loop_start"] = time.time()
        return first_step(self)

    def timed_evaluate(self):
        STATS["loop_end"] = time.time()
        STATS["out_dir"] = str(self.out_dir)
        STATS["lan_bytes"] = self.lan.bytes_sent if self.lan is not None else 0
        return evaluate(self)

    train.Trainer.train_step = train_step
    train.Trainer.evaluate = timed_evaluate


def write_stats() -> None:
    rank = int(os.environ.get("RANK", "0"))
    if STATS["loop_start"] is None or STATS["loop_end"] is None:
        return
    out = Path(STATS["out_dir"]) / f"wan_stats.rank{rank}.json"
    loop = STATS["loop_end"] - STATS["loop_start"]
    out.write_text(json.dumps({**STATS, "rank": rank, "loop_s": loop,
                               "utilization": max(0.0, loop - STATS["wait_s"]) / loop if loop > 0 else None,
                               "utilization_with_lan": (max(0.0, loop - STATS["wait_s"] - STATS["lan_wait_s"]) / loop
                                                        if loop > 0 else None)}))


def main(argv: list[str] | None = None) -> int:
    install()
    code = train.main(argv)
    write_stats()
    return code


if __name__ == "__main__":
    sys.exit(main())
