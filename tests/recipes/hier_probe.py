"""A `recipes.train` worker that first checks the quantised reduce-scatter/all-gather against a plain
fp32 all-reduce on random tensors (all ranks as one WAN group; <out_dir>/exchange.json), then,
after every inner step, which ranks hold identical weights.

    torchrun --nproc-per-node 4 -m tests.recipes.hier_probe --config C datacenters=2 ...

After each step every rank all-gathers its flat parameters (on the default group, outside
the byte counters); rank 0 writes <out_dir>/probe.json: per step, whether each
datacenter's replicas are bitwise equal, whether all ranks are, and whether an outer
step ran; after the last exchange has landed, <out_dir>/final.json: whether all ranks are
equal. Test instrumentation, not a stand-in: the training is the real one.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from recipes import train
from tests.recipes.conftest import against_fp32_mean

RECORDS: list[dict] = []
ROUNDS = 12
NUMEL = 1000  # not a multiple of the block: the last piece has a partial block


def exchange_rounds(rank: int, k: int, bits: int) -> dict:
    """ROUNDS rounds of QuantizedAllReduce over all k ranks against dist.all_reduce (outside its counter)."""
    from recipes.algorithms.hierarchical import GroupWire, QuantizedAllReduce

    wire = GroupWire(k, None, rank)
    reduce = QuantizedAllReduce(NUMEL, bits, 128, wire)
    gen = torch.Generator().manual_seed(100 + rank)
    total_in, total_out = torch.zeros(NUMEL), torch.zeros(NUMEL)
    worst_round, top, identical, first_bytes = 0.0, 0.0, True, 0
    for r in range(ROUNDS):
        x = torch.randn(NUMEL, generator=gen) * (1 + r % 3)  # scales change between rounds
        out = reduce(x)
        same, error, amax = against_fp32_mean(x, out)
        identical = identical and same
        top = max(top, amax)
        worst_round = max(worst_round, error / amax)
        total_in += x
        total_out += out
        if r == 0:
            sent = torch.tensor([wire.bytes_sent], dtype=torch.int64)
            dist.all_reduce(sent)
            first_bytes = int(sent)
    # Conservation: what every rank put in == k x what came out + what the residuals still hold.
    held = reduce.feedback.residual.clone() if reduce.feedback.enabled else torch.zeros(NUMEL)
    dist.all_reduce(held)
    a, b = reduce.pieces[rank]
    reduce_held = torch.zeros(NUMEL)
    if reduce.reduce_feedback.enabled:
        reduce_held[a:b] = reduce.reduce_feedback.residual * k
    dist.all_reduce(reduce_held)
    inputs = total_in.clone()
    dist.all_reduce(inputs)
    conservation = float((k * total_out + held + reduce_held - inputs).abs().max() / inputs.abs().max())
    drift = float((total_out - inputs / k).abs().max() / top)
    return {"bits": bits, "rank": rank, "identical": identical, "worst_round": worst_round, "drift": drift,
            "conservation": conservation, "first_bytes": first_bytes, "payload": reduce.payload_bytes()}


def install() -> None:
    step = train.Trainer.train_step
    init = train.Trainer.__init__

    def checked_init(self, cfg, rt):
        init(self, cfg, rt)
        finish = self.algo.finish

        def checked_finish(last_step):  # after the last exchange has landed: every rank equal?
            finish(last_step)
            flat = torch.cat([p.detach().float().flatten() for p in self.model.parameters()])
            every = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
            dist.all_gather(every, flat)
            if rt.rank == 0:
                (self.out_dir / "final.json").write_text(json.dumps(
                    {"all_equal": all(torch.equal(every[0], w) for w in every), "wan_bytes": self.wire.bytes_sent,
                     "exchange_thread": self.algo.exchange.ran_on}))

        self.algo.finish = checked_finish
        mine = [exchange_rounds(rt.rank, rt.world_size, bits) for bits in (8, 4, 1, 16)]
        every: list = [None] * rt.world_size
        dist.all_gather_object(every, mine)
        if rt.rank == 0:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            (self.out_dir / "exchange.json").write_text(json.dumps([r for rows in every for r in rows]))

    def probed(self):
        outer_before = self.algo.outer_step
        loss = step(self)
        flat = torch.cat([p.detach().float().flatten() for p in self.model.parameters()])
        every = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
        dist.all_gather(every, flat)
        count = self.cfg.datacenters
        size = len(every) // count
        dcs = [every[d * size:(d + 1) * size] for d in range(count)]
        RECORDS.append({"step": self.step, "outer": self.algo.outer_step > outer_before,
                        "dc_equal": [all(torch.equal(dc[0], w) for w in dc) for dc in dcs],
                        "all_equal": all(torch.equal(every[0], w) for w in every),
                        "wan_bytes": self.wire.bytes_sent, "lan_bytes": self.lan.bytes_sent})
        if self.rt.rank == 0:
            (self.out_dir / "probe.json").write_text(json.dumps(RECORDS))
        return loss

    train.Trainer.train_step = probed
    train.Trainer.__init__ = checked_init


def main(argv: list[str] | None = None) -> int:
    install()
    return train.main(argv)


if __name__ == "__main__":
    sys.exit(main())
