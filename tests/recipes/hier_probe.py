"""A `recipes.train` worker that checks, after every inner step, which ranks hold identical weights.

    torchrun --nproc-per-node 4 -m tests.recipes.hier_probe --config C datacenters=2 ...

After each step every rank all-gathers its flat parameters (on the default group, outside
the byte counters); rank 0 writes <out_dir>/probe.json: per step, whether each
datacenter's replicas are bitwise equal, whether all ranks are, and whether an outer
step ran. Test instrumentation, not a stand-in: the training is the real one.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from recipes import train

RECORDS: list[dict] = []


def install() -> None:
    step = train.Trainer.train_step

    def probed(self):
        outer_before = self.algo.outer_step
        loss = step(self)
        flat = torch.cat([p.detach().float().flatten() for p in self.model.parameters()])
        every = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
        dist.all_gather(every, flat)
        per_dc = self.cfg.datacenters
        size = len(every) // per_dc
        dcs = [every[d * size:(d + 1) * size] for d in range(per_dc)]
        RECORDS.append({"step": self.step, "outer": self.algo.outer_step > outer_before,
                        "dc_equal": [all(torch.equal(dc[0], w) for w in dc) for dc in dcs],
                        "all_equal": all(torch.equal(every[0], w) for w in every),
                        "wan_bytes": self.wire.bytes_sent, "lan_bytes": self.lan.bytes_sent})
        if self.rt.rank == 0:
            (self.out_dir / "probe.json").write_text(json.dumps(RECORDS))
        return loss

    train.Trainer.train_step = probed


def main(argv: list[str] | None = None) -> int:
    install()
    return train.main(argv)


if __name__ == "__main__":
    sys.exit(main())
