"""Hierarchical DiLoCo: data parallel inside a datacenter, quantised reduce-scatter/all-gather between them.

Real gloo processes throughout: the exchange is checked against a plain fp32 all-reduce
on random tensors, and a 2 datacenter x 2 worker training run is checked step by step.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from recipes.topology import Topology, TopologyError, layout, resolve
from tests.recipes.conftest import REPO, TINY_GPT, free_port, recipe_env

K = 4  # datacenters in the exchange test
ROUNDS = 12
NUMEL = 1000  # not a multiple of the block: the last piece has a partial block
# Elementwise bound on one round's error, as a fraction of the largest |input|: each of the two
# quantisations (stage 1 per sender, stage 2 at the reducer) is off by at most half a code step
# of the block's scale: 2^-4 relative for e4m3, 1/6 of the absmax for e2m1 (gap 2 at the top, /6).
BOUND = {8: 2 * 2 ** -4 * 1.07, 4: 2 * (1 / 6) * 1.2, 16: 2 * 2 ** -8 * 1.01}


def _exchange_worker(rank: int, port: int, queue) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=K)
    for bits in BOUND:
        queue.put((bits, *_rounds(rank, bits)))
    dist.destroy_process_group()


def _rounds(rank: int, bits: int) -> tuple:
    from recipes.algorithms.hierarchical import GroupWire, QuantizedAllReduce

    wire = GroupWire(K, None, rank)
    reduce = QuantizedAllReduce(NUMEL, bits, 128, wire)
    gen = torch.Generator().manual_seed(100 + rank)
    total_in, total_out = torch.zeros(NUMEL), torch.zeros(NUMEL)
    worst_round, top = 0.0, 0.0
    for r in range(ROUNDS):
        x = torch.randn(NUMEL, generator=gen) * (1 + r % 3)  # scales change between rounds
        exact = x.clone()
        dist.all_reduce(exact)  # the plain fp32 all-reduce (outside the byte counter)
        exact /= K
        out = reduce(x)
        outs = [torch.empty_like(out) for _ in range(K)]
        dist.all_gather(outs, out)
        assert all(torch.equal(outs[0], o) for o in outs), "ranks decoded different averages"
        amax = x.abs().max().reshape(1)
        dist.all_reduce(amax, op=dist.ReduceOp.MAX)
        top = max(top, float(amax))
        worst_round = max(worst_round, float((out - exact).abs().max() / amax))
        total_in += x
        total_out += out
        if r == 0:
            sent = torch.tensor([wire.bytes_sent], dtype=torch.int64)
            dist.all_reduce(sent)
            first_bytes = int(sent)
    # Conservation: what every rank put in == K x what came out + what the residuals still hold.
    held = reduce.feedback.residual.clone() if reduce.feedback.enabled else torch.zeros(NUMEL)
    dist.all_reduce(held)
    a, b = reduce.pieces[rank]
    reduce_held = torch.zeros(NUMEL)
    if reduce.reduce_feedback.enabled:
        reduce_held[a:b] = reduce.reduce_feedback.residual * K
    dist.all_reduce(reduce_held)
    inputs = total_in.clone()
    dist.all_reduce(inputs)
    conservation = float((K * total_out + held + reduce_held - inputs).abs().max() / inputs.abs().max())
    exact_total = inputs / K
    drift = float((total_out - exact_total).abs().max() / top)
    return rank, worst_round, drift, conservation, first_bytes, reduce.payload_bytes()


def test_quantised_reduce_scatter_all_gather_against_fp32_all_reduce():
    """fp8, fp4 and bf16 pieces, K=4 real gloo ranks, ROUNDS rounds each."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_exchange_worker, args=(r, port, queue)) for r in range(K)]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=180) for _ in range(K * len(BOUND)))
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert len(results) == K * len(BOUND)
    for bits, rank, worst_round, drift, conservation, first_bytes, payload in results:
        # each round is within the two quantisations' bound of the exact mean
        assert worst_round <= BOUND[bits], (bits, worst_round)
        assert worst_round > 0  # something was really quantised (bf16 included)
        if bits != 16:
            # error feedback: nothing dropped is lost, to fp32 rounding over ROUNDS rounds ...
            assert conservation < 1e-5, conservation
            # ... so the error of the running sum stays one round's worth, not ROUNDS rounds'
            assert drift <= BOUND[bits], (drift, worst_round)
        # the K members together sent 2(K-1) payloads' worth: 2(K-1)/K of one payload each
        assert first_bytes == 2 * (K - 1) * payload


def test_topology_from_env_and_from_datacenters():
    env = {"GEOTRAIN_DATACENTER": "fra", "GEOTRAIN_DC_INDEX": "1", "GEOTRAIN_DC_COUNT": "3",
           "GEOTRAIN_DC_RANK": "0", "GEOTRAIN_DC_SIZE": "2"}
    assert resolve(5, 6, 1, env) == Topology("fra", 1, 3, 0, 2)
    assert resolve(5, 6, 3, {}) == Topology("dc2", 2, 3, 1, 2)
    assert not resolve(0, 4, 1, {}).hierarchical
    with pytest.raises(TopologyError, match="split evenly"):
        resolve(0, 5, 2, {})
    with pytest.raises(TopologyError, match="same number"):
        resolve(0, 5, 1, env)
    with pytest.raises(TopologyError, match="whole number"):
        resolve(0, 6, 1, {**env, "GEOTRAIN_DC_RANK": "0; rm -rf /"})
    # ranks in any order (as a scheduler may hand them out) still give consistent groups
    lan, wan = layout([(1, 0), (0, 1), (1, 1), (0, 0)], 2, 2)
    assert lan == [[3, 1], [0, 2]] and wan == [[3, 0], [1, 2]]
    with pytest.raises(TopologyError, match="claim"):
        layout([(0, 0), (0, 0)], 1, 2)


def test_two_datacenters_of_two_workers_train_as_two_replicas(tmp_path):
    """DC replicas equal after every inner step, every rank equal after every outer step."""
    out = tmp_path / "run"
    steps, inner = 9, 3
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
           "-m", "tests.recipes.hier_probe", "--config", str(TINY_GPT), "datacenters=2",
           "gradient_compression=medium", f"diloco.inner_steps={inner}", f"steps={steps}", f"out_dir={out}",
           "device=cpu", "dist.backend=gloo", "data.batch_size=2", "data.seq_len=16", "logging.wandb=false",
           "checkpoint.every=0", "logging.log_every=3", "logging.eval_batches=1", "optim.warmup_steps=1"]
    proc = subprocess.run(cmd, cwd=REPO, env=recipe_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "hierarchical DiLoCo: datacenter dc1 (2 of 2), rank 1 of 2 there" in proc.stdout
    probe = json.loads((out / "probe.json").read_text())
    assert [p["step"] for p in probe] == list(range(1, steps + 1))
    for p in probe:
        assert p["dc_equal"] == [True, True], p
        assert p["all_equal"] == p["outer"], p  # equal exactly at the outer steps, not between
    assert [p["step"] for p in probe if p["outer"]] == [3, 6, 9]
    # WAN bytes: rank 0 carries half the datacenter's pseudo-gradient, in fp8 plus block scales,
    # reduce-scattered and all-gathered between 2 datacenters: 2(K-1)/K = 1 x its payload per outer step.
    wan = [p["wan_bytes"] for p in probe if p["outer"]]
    assert wan[0] > 0 and wan == [wan[0] * k for k in (1, 2, 3)]
    assert probe[0]["lan_bytes"] > 0 and probe[0]["wan_bytes"] == 0  # inner steps stay on the LAN
    result = json.loads((out / "result.json").read_text())
    assert result["lan_bytes"] > 0 and result["bytes_sent"] == wan[-1]

