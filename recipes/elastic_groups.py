"""The groups one elastic outer step runs on, and the datacenters' equal say in its average.

Each outer step's present members (recipes.elastic) may span datacenters (GEOTRAIN_DATACENTER
names a worker's; absent, every worker is in one). The average counts every datacenter present
once, however many of its workers are left: a datacenter that lost one worker of two still
weighs as one datacenter, and one that is gone entirely is simply not in the average.

- full-precision exchanges (fp32/bf16 all-reduce) run hierarchically: the members of a
  datacenter sum and average among themselves (LAN), one leader per datacenter averages
  those over the WAN, and each leader broadcasts the result inside its datacenter. Only the
  leaders' exchange crosses the WAN: `bytes_sent` counts it, `lan_bytes` the rest;
- exchanges that all-gather compressed payloads run over one group of every member (a
  gathered payload is decoded per sender, so it cannot be summed inside a datacenter first);
  each member scales its pseudo-gradient by members / (datacenters x its datacenter's members)
  before encoding, so the plain mean of the decoded payloads is the mean over datacenters.
  All of that group's bytes are counted as WAN bytes (an upper bound: a ring keeps some inside).
- when the members present are all in one named datacenter (the others lost), their exchange stays
  inside it and is counted in `lan_bytes`.
"""

from __future__ import annotations

import time

import torch

from recipes.distributed import Wire
from recipes.telemetry import network_wait, timed

DEFAULT_DC = "default"


def by_datacenter(members) -> dict[str, list[int]]:
    """Datacenter -> its members' ranks, in rank order (members carry `.rank` and `.dc`)."""
    out: dict[str, list[int]] = {}
    for m in sorted(members, key=lambda m: m.rank):
        out.setdefault(m.dc or DEFAULT_DC, []).append(m.rank)
    return out


def dc_weight(rank: int, dcs: dict[str, list[int]]) -> float:
    """The factor on `rank`'s pseudo-gradient that makes a plain mean over all members a mean over datacenters."""
    total = sum(len(r) for r in dcs.values())
    mine = next(r for r in dcs.values() if rank in r)
    return total / (len(dcs) * len(mine))


class ElasticWire(Wire):
    """Wire whose collectives run on the current outer step's groups of present members."""

    def __init__(self, world_size: int) -> None:
        super().__init__(world_size)
        self._pg = None
        self._flat = None  # builds the group of every member when a collective first needs it
        self.local = self.wan = None
        self.local_size = self.wan_size = 1
        self.lan_bytes = 0
        self.weight = 1.0
        self.inside_dc = False  # this outer step's members are all in one named datacenter

    def use(self, flat, world: int | None = None, local=None, wan=None, local_size: int = 1,
            wan_size: int = 1) -> None:
        """`flat` is the group of all `world` members, or a function making it when first needed;
        `local`/`wan` (hierarchical) this rank's datacenter group and the leaders' group (None where
        this rank is in neither or alone)."""
        if callable(flat):
            self._pg, self._flat = None, flat
        else:
            self._pg, self._flat = flat, None
            world = flat.size() if flat is not None else 1
        self.world_size = world
        self.local, self.wan, self.local_size, self.wan_size = local, wan, local_size, wan_size

    def release(self) -> None:
        self.use(None)
        self.weight, self.inside_dc = 1.0, False

    def _count(self, nbytes: int) -> None:
        """A collective over every member: inside one datacenter (only its members present) it is LAN."""
        if self.inside_dc:
            self.lan_bytes += nbytes
        else:
            self.bytes_sent += nbytes

    @property
    def hierarchical(self) -> bool:
        return self.wan_size > 1 and self.world_size > self.wan_size

    @property
    def pg(self):
        """The group of every member (what recipes.algorithms.reduce_scatter's FlatPeers runs on)."""
        if self._pg is None and self._flat is not None and self.world_size > 1:
            self._pg = self._flat()
        return self._pg

    def _group(self):
        return self.pg

    def all_reduce_mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        work = self.all_reduce_async(tensor)
        if work is not None:
            work.wait()
        if self.world_size > 1:
            tensor.div_(self.world_size)
        return tensor

    def all_reduce_async(self, tensor: torch.Tensor):
        """The sum over members (FullPrecisionExchange divides by world_size); hierarchical when the
        members span datacenters: then the datacenters' means are averaged, and the result is given
        as that average times world_size (so the caller's division yields it). Synchronous then."""
        if self.world_size == 1:
            return None
        size = tensor.numel() * tensor.element_size()
        if not self.hierarchical:
            n = self.world_size
            self._count(2 * (n - 1) * size // n)
            return timed(self._group().allreduce([tensor]))
        with network_wait():
            if self.local is not None:  # my datacenter's mean
                self.lan_bytes += 2 * (self.local_size - 1) * size // self.local_size
                self.local.allreduce([tensor]).wait()
                tensor.div_(self.local_size)
            if self.wan is not None:  # leaders: the datacenters' mean over the WAN
                self.bytes_sent += 2 * (self.wan_size - 1) * size // self.wan_size
                self.wan.allreduce([tensor]).wait()
                tensor.div_(self.wan_size)
            if self.local is not None:  # back to the datacenter from its leader (local rank 0)
                if self.local.rank() == 0:
                    self.lan_bytes += (self.local_size - 1) * size
                self.local.broadcast(tensor, 0).wait()
        tensor.mul_(self.world_size)
        return None

    def all_gather(self, payload: torch.Tensor, async_op: bool = False):
        if self.world_size == 1:
            return (None, [payload]) if async_op else [payload]
        self._count((self.world_size - 1) * payload.numel() * payload.element_size())
        out = [torch.empty_like(payload) for _ in range(self.world_size)]
        work = self._group().allgather([out], [payload.contiguous()])
        if async_op:
            return timed(work), out
        with network_wait():
            work.wait()
        return out


def weighted_start(exchange, wire: ElasticWire):
    """`exchange.start` with the pseudo-gradient scaled by the wire's datacenter weight (1.0: as is)."""
    start = exchange.start

    def scaled(delta: torch.Tensor, *args, **kwargs):
        return start(delta.mul(wire.weight) if wire.weight != 1.0 else delta, *args, **kwargs)

    return scaled


class Liveness:
    """Which ranks heartbeat: a counter that has not moved for `timeout` seconds means gone."""

    def __init__(self, store, world: int, timeout: float) -> None:
        self.store, self.world, self.timeout = store, world, timeout
        self.seen: dict[int, tuple[int, float]] = {}

    def alive(self) -> set[int]:
        now = time.monotonic()
        out = set()
        keys = [f"hb/{rank}" for rank in range(self.world)]
        if hasattr(self.store, "get_many"):  # the network store: one round trip, not two per rank
            values = [int(v) if v is not None else 0 for v in self.store.get_many(keys)]
        else:  # read, not add(0): a FileStore appends a record for every add
            values = [int(self.store.get(key)) if self.store.check([key]) else 0 for key in keys]
        for rank, value in enumerate(values):
            last = self.seen.get(rank)
            if last is None or last[0] != value:
                self.seen[rank] = (value, now)
            if now - self.seen[rank][1] < self.timeout:
                out.add(rank)
        return out
