"""Parallel streams give the same sums and gathers as one connection (two real gloo processes)."""

import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, queue) -> None:
    from recipes.streams import Streams

    os.environ.update(GEOTRAIN_WAN_STREAMS="3", GEOTRAIN_WAN_STREAM_MIN_BYTES="64")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    streams = Streams.from_env()
    big = torch.arange(1000, dtype=torch.float32) * (rank + 1)
    streams.all_reduce(big)
    small = torch.ones(4) * (rank + 1)  # under the threshold: one stripe
    work = streams.all_reduce(small, async_op=True)
    work.wait()
    payload = torch.arange(301, dtype=torch.uint8) + rank
    out = [torch.empty_like(payload) for _ in range(2)]
    streams.all_gather(out, payload, async_op=True).wait()
    queue.put((rank, streams.count, len(streams._bounds(big)), len(streams._bounds(small)),
               bool(torch.equal(big, torch.arange(1000, dtype=torch.float32) * 3)),
               bool(torch.equal(small, torch.full((4,), 3.0))),
               [o.tolist() for o in out]))
    dist.destroy_process_group()


def test_striped_collectives_match_plain_ones():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    expected = [(torch.arange(301, dtype=torch.uint8) + r).tolist() for r in range(2)]
    for rank, count, big_stripes, small_stripes, big_ok, small_ok, gathered in results:
        assert (count, big_stripes, small_stripes) == (3, 3, 1)
        assert big_ok and small_ok
        assert gathered == expected
