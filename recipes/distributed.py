"""Process group setup (WAN-friendly timeouts and sockets, in one place) and byte-counted collectives.

Bytes are counted for the standard ring algorithms, per rank: an all-reduce of B
bytes sends 2(N-1)/N * B, an all-gather of a B-byte contribution sends (N-1) * B.
With one process nothing crosses a wire and nothing is counted.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from recipes.private_store import GROUP_STORE_ENV, open_file_store
from recipes.schema import DistConfig
from recipes.streams import Streams
from recipes.telemetry import emit, network_wait, timed

# Environment torch.distributed reads; set once here before the group exists.
WAN_ENV = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",  # a dead peer fails the job instead of hanging it
    "NCCL_SOCKET_NTHREADS": "4",  # more sockets per peer help on long fat WAN pipes
    "NCCL_NSOCKS_PERTHREAD": "4",
    "NCCL_IB_DISABLE": "1",  # WAN links are TCP; avoid probing absent InfiniBand
    "GLOO_SOCKET_TIMEOUT_MS": "600000",
}


@dataclass(kw_only=True)
class Runtime:
    """Who this process is and where it computes."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    distributed: bool


def setup(cfg: DistConfig, device_choice: str = "auto") -> Runtime:
    """Join the torchrun group (or run alone) with timeouts suited to WAN links."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() if device_choice == "auto" else device_choice == "cuda"
    device = torch.device(gpu_for(local_rank, torch.cuda.device_count(), cfg.backend) if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    for key, value in WAN_ENV.items():
        os.environ.setdefault(key, value)
    if cfg.socket_ifname:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", cfg.socket_ifname)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", cfg.socket_ifname)
    # Elastic DiLoCo forms its own groups per outer step (recipes.elastic): no fixed group.
    distributed = world_size > 1 and not os.environ.get("GEOTRAIN_ELASTIC_STORE")
    if distributed and not dist.is_initialized():
        backend = cfg.backend if cfg.backend != "auto" else ("nccl" if use_cuda else "gloo")
        timeout = timedelta(seconds=cfg.timeout_s)
        started = time.monotonic()
        emit("rendezvous", stage="waiting", rank=rank, world=world_size)
        # device_id binds NCCL's communicator eagerly; bound to a gloo group it breaks new_group
        # (torch 2.11: ProcessGroupGloo has no perform_nocolor_split), so gloo on GPUs goes unbound
        dist.init_process_group(backend=backend, timeout=timeout,
                                device_id=device if use_cuda and backend == "nccl" else None,
                                **_store_args(attempt_store(world_size, timeout), rank, world_size))
        emit("rendezvous", stage="joined", rank=rank, world=world_size,
             seconds=round(time.monotonic() - started, 3))
    return Runtime(rank=rank, world_size=world_size, local_rank=local_rank, device=device,
                   distributed=distributed)


def gpu_for(local_rank: int, gpus: int, backend: str) -> str:
    """`cuda:<local rank>`; with `dist.backend: gloo`, workers beyond the node's GPUs share them
    round-robin (a one-GPU machine running a 2-worker trial). NCCL needs a GPU per worker."""
    if gpus < 1:
        raise SystemExit("device is cuda but no GPU is visible: set device=cpu or check CUDA_VISIBLE_DEVICES")
    if local_rank >= gpus and backend != "gloo":
        raise SystemExit(f"worker {local_rank} has no GPU of its own ({gpus} visible): start no more workers "
                         "per node than it has GPUs, or set dist.backend=gloo to let workers share GPUs")
    return f"cuda:{local_rank % gpus}"


def attempt_store(world_size: int, timeout: timedelta) -> dist.Store | None:
    """The group's store: on the local cluster a FileStore in the run's private directory
    (recipes.private_store; never a TCPStore, which any host could reach); in a pod
    torchrun's agent store, with keys of this restart attempt only.

    After `--max-restarts` brings a group back, the agent store still holds the dead
    workers' gloo addresses; a restarted rank that reads one connects to a closed port
    and the whole attempt fails (seen with torch 2.13). A prefix per attempt avoids it.
    """
    if os.environ.get(GROUP_STORE_ENV):
        return open_file_store(os.environ[GROUP_STORE_ENV], timeout)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None  # plain env:// rendezvous (one process, static launch): torch's default
    client = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                           is_master=False, timeout=timeout)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"/geotrain/attempt_{attempt}", client)


def _store_args(store: dist.Store | None, rank: int, world_size: int) -> dict:
    return {"store": store, "rank": rank, "world_size": world_size} if store is not None else {}


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


class Wire:
    """Collectives that count the bytes this rank sends (`bytes_sent`, cumulative) and the time the training
    thread waits on them (recipes.telemetry.network_wait)."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.bytes_sent = 0
        self.streams = Streams.from_env()  # None unless GEOTRAIN_WAN_STREAMS > 1

    def all_reduce_mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Average `tensor` across ranks in place (sum on the wire, divide locally)."""
        if self.world_size == 1:
            return tensor
        n = self.world_size
        self.bytes_sent += 2 * (n - 1) * tensor.numel() * tensor.element_size() // n
        with network_wait():
            if self.streams:
                self.streams.all_reduce(tensor)
            else:
                dist.all_reduce(tensor)
        tensor.div_(n)
        return tensor

    def all_gather(self, payload: torch.Tensor, async_op: bool = False):
        """Every rank's payload (same length on all ranks); with async_op, (work, list)."""
        if self.world_size == 1:
            return (None, [payload]) if async_op else [payload]
        self.bytes_sent += (self.world_size - 1) * payload.numel() * payload.element_size()
        out = [torch.empty_like(payload) for _ in range(self.world_size)]
        with network_wait():  # an async start returns at once; its wait() counts then
            if self.streams:
                work = self.streams.all_gather(out, payload.contiguous(), async_op=async_op)
            else:
                work = dist.all_gather(out, payload.contiguous(), async_op=async_op)
        return (timed(work), out) if async_op else out

    def all_reduce_async(self, tensor: torch.Tensor):
        """Start a sum all-reduce; the caller waits and divides."""
        if self.world_size == 1:
            return None
        n = self.world_size
        self.bytes_sent += 2 * (n - 1) * tensor.numel() * tensor.element_size() // n
        if self.streams:
            return timed(self.streams.all_reduce(tensor, async_op=True))
        return timed(dist.all_reduce(tensor, async_op=True))
