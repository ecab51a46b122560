"""Hierarchical DiLoCo: data parallel inside a datacenter, DiLoCo's outer exchange between datacenters.

Inside a datacenter the workers are one replica: gradients are all-reduced every
step over its LAN group (the DDP bucket code on a sub-group), so they hold identical
weights and the datacenter trains like one big worker. Every H steps the
pseudo-gradient (identical on the datacenter's workers) is cut into M shards, one per
worker of the datacenter; worker j averages shard j with worker j of every other
datacenter (its WAN group), so a datacenter's traffic spreads over all its workers'
links. That average is a *quantised reduce-scatter then all-gather*:

    1. shard j is cut into K pieces; piece i is encoded (with error feedback) and sent to
       datacenter i  (all-to-all: (K-1)/K of a shard's payload leaves each worker);
    2. datacenter i decodes the K copies of its piece, sums them in fp32, divides by K
       and re-encodes the mean with its own error feedback;
    3. the K encoded means are all-gathered ((K-1)/K again).

So one datacenter sends 2(K-1)/K of one payload per outer step whatever M is, instead
of (K-1) payloads for an all-gather (recipes.algorithms.reduce_scatter; flat DiLoCo runs the
same over all its workers). Last, the datacenter's workers all-gather their averaged shards
over the LAN. `bytes_sent` of the trainer's wire counts what crosses
the WAN; the LAN wire counts what stays inside datacenters.

With `diloco.overlap`, the exchange runs on a background thread (one at a time), on CPU
tensors over gloo groups of its own (the WAN groups and a twin of the datacenter's LAN
group), so it never interleaves with the inner steps' all-reduces nor, on GPUs, queues on
their stream; the next outer step waits for it. What it sent is counted when it has landed.
"""

from __future__ import annotations

import threading

import torch
import torch.distributed as dist

from recipes.algorithms.ddp import DDP
from recipes.algorithms.diloco import DiLoCo
from recipes.algorithms.exchange import Pending
from recipes.algorithms.reduce_scatter import QuantizedAllReduce, cut
from recipes.distributed import Wire
from recipes.telemetry import network_wait
from recipes.topology import Topology, layout


class GroupWire(Wire):
    """A byte-counted Wire on one process group (a datacenter's LAN, or a WAN stripe)."""

    def __init__(self, size: int, group, me: int) -> None:
        self.world_size, self.group, self.me = size, group, me
        self.own_bytes = 0
        self.unposted = 0  # deferred: counted by a background exchange, added by post() when it has landed
        self.deferred = False
        self.twins: list[GroupWire] = []
        self.streams = None  # striping is for the flat exchange; sub-groups use one connection each

    @property
    def bytes_sent(self) -> int:
        """What this member sent on this group and on its twins (same members, other connections)."""
        return self.own_bytes + sum(t.own_bytes for t in self.twins)

    @bytes_sent.setter
    def bytes_sent(self, value: int) -> None:  # a resumed run restores its total
        self.own_bytes = value - sum(t.own_bytes for t in self.twins)

    def count(self, nbytes: int) -> None:
        if self.deferred:
            self.unposted += nbytes
        else:
            self.own_bytes += nbytes

    def post(self) -> None:
        """Add what a landed background exchange sent (called on the training thread after it)."""
        self.own_bytes, self.unposted = self.own_bytes + self.unposted, 0

    def twin(self, group) -> GroupWire:
        """A wire on `group` (the same members: new connections), counted in this one's bytes_sent;
        each keeps its own counter, so two threads never add to one."""
        other = GroupWire(self.world_size, group, self.me)
        self.twins.append(other)
        return other

    def all_reduce_mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return tensor
        n = self.world_size
        self.count(2 * (n - 1) * tensor.numel() * tensor.element_size() // n)
        with network_wait():  # counts on the training thread only, not in a background exchange
            dist.all_reduce(tensor, group=self.group)
        return tensor.div_(n)

    def exchange(self, send: list[torch.Tensor], recv_numel: list[int]) -> list[torch.Tensor]:
        """Member i gets send[i] (an all-to-all with uneven parts); returns what each member sent
        here. Bytes counted: every part but the one this member keeps."""
        if self.world_size == 1:
            return [send[0]]
        self.count(sum(t.numel() * t.element_size() for i, t in enumerate(send) if i != self.me))
        flat = torch.cat([t.contiguous().view(-1) for t in send])
        out = flat.new_empty(sum(recv_numel))
        with network_wait():
            dist.all_to_all_single(out, flat, output_split_sizes=list(recv_numel),
                                   input_split_sizes=[t.numel() for t in send], group=self.group)
        return list(out.split(list(recv_numel)))


class BackgroundWork:
    """An exchange running on its own thread; wait() is where training waits for the WAN.
    A daemon thread: a worker that fails mid-exchange exits without waiting for it."""

    def __init__(self, run, *args) -> None:
        self.result: torch.Tensor | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, args=(run, *args), name="geotrain-wan-exchange",
                                       daemon=True)
        self.thread.start()

    def _main(self, run, *args) -> None:
        try:
            self.result = run(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread by wait()
            self.error = exc

    def done(self) -> None:
        self.thread.join()

    def wait(self) -> torch.Tensor:
        with network_wait():
            self.thread.join()
        if self.error is not None:
            raise self.error
        return self.result


class HierarchicalExchange:
    """DiLoCo's exchange between datacenters: this worker's shard over its WAN group, then the
    datacenter's shards gathered over the LAN. `start(async_op=True)` runs it in the background
    (needs `lan_exchange`, a twin of the LAN group the inner steps do not use); exchanges never
    run two at a time (one WAN group, one error-feedback state)."""

    def __init__(self, numel: int, bits: int, block: int, lan: GroupWire, wan: GroupWire,
                 error_feedback: bool = True, lan_exchange: GroupWire | None = None, rotate: bool = False) -> None:
        self.numel, self.lan, self.wire = numel, lan, wan
        self.lan_exchange = lan_exchange
        align = block if bits not in (32, 16) else 1
        self.shards = cut(numel, lan.world_size, align)
        a, b = self.shards[lan.me]
        self.reduce = QuantizedAllReduce(b - a, bits, block, wan, error_feedback, rotate)
        if lan_exchange is not None:  # overlapped: the WAN wire and the twin are the exchange thread's alone
            wan.deferred = lan_exchange.deferred = True
        self.last: BackgroundWork | None = None
        self.before: dict | None = None  # error feedback before the exchange in flight, until it is finished
        self.ran_on = ""  # the thread that ran the latest exchange (tests)

    def _run(self, delta: torch.Tensor, lan: GroupWire) -> torch.Tensor:
        self.ran_on = threading.current_thread().name
        a, b = self.shards[lan.me]
        shard = self.reduce(delta[a:b])
        parts = lan.exchange([shard] * lan.world_size, [hi - lo for lo, hi in self.shards])
        return torch.cat(parts)

    def start(self, delta: torch.Tensor, async_op: bool = False) -> Pending:
        self.drain()
        if self.last is not None and self.last.error is not None:
            raise self.last.error  # never start the next exchange on groups the last one left mid-way
        if not async_op or self.lan_exchange is None:  # (a resumed run that turned overlap off re-sends in line)
            return Pending(sent=delta, gathered=[self._run(delta, self.lan)])
        self.before = {k: v.clone() if torch.is_tensor(v) else v for k, v in self.reduce.state_dict().items()}
        self.last = BackgroundWork(self._run, delta.detach().to("cpu", copy=True), self.lan_exchange)
        return Pending(sent=delta, work=self.last)

    def drain(self) -> None:
        """Wait for the exchange in flight, if any, and count what it sent (its result or error
        stays with its Pending)."""
        if self.last is not None:
            self.last.done()
            self.wire.post()
            if self.lan_exchange is not None:
                self.lan_exchange.post()

    def reissue(self, sent: torch.Tensor, async_op: bool = False) -> Pending:
        return self.start(sent, async_op)

    def finish(self, pending: Pending) -> torch.Tensor:
        if pending.work is None:
            return pending.gathered[0]
        if pending.work is self.last:  # an older one was landed (and counted) when this one started
            self.drain()
            self.before = None
        return pending.work.wait()

    def state_dict(self) -> dict:
        """Error feedback as it was before the exchange still in flight: a resumed run re-sends
        that exchange (DiLoCo keeps what it sent), so it must start from the same state."""
        self.drain()
        return self.before if self.before is not None else self.reduce.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.reduce.load_state_dict(state)


class HierarchicalDiLoCo(DiLoCo):
    """DiLoCo whose replicas are datacenters: inner gradients are all-reduced over the LAN group."""

    name = "diloco-hierarchical"

    def __init__(self, model: torch.nn.Module, exchange: HierarchicalExchange, **kwargs) -> None:
        super().__init__(model, exchange, **kwargs)
        self.lan = DDP(model, exchange.lan)

    def after_backward(self) -> None:
        self.lan.after_backward()


def places(topology: Topology) -> list[tuple[int, int]]:
    """Every rank's (datacenter index, rank in it), exchanged as plain int64 tensors: nothing a
    peer sends is unpickled (all_gather_object would)."""
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    mine = torch.tensor([topology.index, topology.rank], dtype=torch.int64, device=device)
    gathered = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    return [(int(t[0]), int(t[1])) for t in gathered]  # layout() refuses a place out of range


def groups(topology: Topology, overlap: bool = False) -> tuple[GroupWire, GroupWire, GroupWire | None]:
    """(LAN wire, WAN wire, the LAN's twin for an overlapped exchange or None) of this rank;
    a collective: every rank calls it, in the same order, with the same `overlap`."""
    lan_ranks, wan_ranks = layout(places(topology), topology.count, topology.size)
    lan = wan = twin = None
    for ranks in lan_ranks:  # new_group is collective: all ranks create all groups
        group = dist.new_group(ranks)
        if ranks == lan_ranks[topology.index]:
            lan = GroupWire(len(ranks), group, topology.rank)
    # overlapped: the exchange runs on CPU tensors over gloo groups on its own thread, so on GPUs it
    # never queues on the training stream nor runs two NCCL communicators at once
    side = "gloo" if overlap else None
    for ranks in wan_ranks:
        group = dist.new_group(ranks, backend=side)
        if ranks == wan_ranks[topology.rank]:
            wan = GroupWire(len(ranks), group, topology.index)
    if overlap:
        for ranks in lan_ranks:
            group = dist.new_group(ranks, backend=side)
            if ranks == lan_ranks[topology.index]:
                twin = lan.twin(group)
    return lan, wan, twin
