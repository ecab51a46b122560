"""Hierarchical DiLoCo: data parallel inside a datacenter, quantised reduce-scatter/all-gather between them.

Real gloo processes throughout: the exchange is checked against a plain fp32 all-reduce
on random tensors, and a 2 datacenter x 2 worker training run is checked step by step.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from recipes.topology import Topology, TopologyError, layout, resolve
from tests.recipes.conftest import REPO, TINY_GPT, free_port, recipe_env

# Elementwise bound on one round's error, as a fraction of the largest |input|: each of the two
# quantisations (stage 1 per sender, stage 2 at the reducer) is off by at most half a code step
# of the block's scale: 2^-4 relative for e4m3, 1/6 of the absmax for e2m1 (gap 2 at the top, /6).
# 1-bit: sign x block mean |x| is off by at most the block's largest value, once per quantisation
BOUND = {8: 2 * 2 ** -4 * 1.07, 4: 2 * (1 / 6) * 1.2, 1: 2 * 1.01, 16: 2 * 2 ** -8 * 1.01}
STEPS, INNER = 9, 3


def _probe(out, *extra: str):
    """One real 4-rank torchrun (gloo): the exchange rounds on random tensors, then a 2 datacenter
    x 2 worker training run checked after every step (tests/recipes/hier_probe.py)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
           "-m", "tests.recipes.hier_probe", "--config", str(TINY_GPT), "datacenters=2",
           "gradient_compression=medium", f"diloco.inner_steps={INNER}", f"steps={STEPS}", f"out_dir={out}",
           "device=cpu", "dist.backend=gloo", "data.batch_size=2", "data.seq_len=16", "logging.wandb=false",
           "checkpoint.every=0", "logging.log_every=3", "logging.eval_batches=1", "optim.warmup_steps=1", *extra]
    proc = subprocess.run(cmd, cwd=REPO, env=recipe_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory):
    return _probe(tmp_path_factory.mktemp("hier") / "run")


def test_quantised_reduce_scatter_all_gather_against_fp32_all_reduce(probe_run):
    """fp8, fp4, 1-bit signs and bf16, K=4 real gloo ranks, hier_probe.ROUNDS rounds each."""
    results = json.loads((probe_run[0] / "exchange.json").read_text())
    assert sorted({r["bits"] for r in results}) == [1, 4, 8, 16] and len(results) == 16
    for r in results:
        bits = r["bits"]
        assert r["identical"], r  # every rank decoded the same average
        # each round is within the two quantisations' bound of the exact mean
        assert 0 < r["worst_round"] <= BOUND[bits], r  # > 0: something was really quantised (bf16 too)
        if bits != 16:
            # error feedback: nothing dropped is lost, to fp32 rounding over the rounds ...
            assert r["conservation"] < 1e-5, r
            # ... so the error of the running sum stays one round's worth, not ROUNDS rounds'
            assert r["drift"] <= BOUND[bits], r
        # the K members together sent 2(K-1) payloads' worth: 2(K-1)/K of one payload each
        assert r["first_bytes"] == 2 * (4 - 1) * r["payload"], r


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
    with pytest.raises(TopologyError, match="outside"):  # a peer's place out of range (or negative)
        layout([(0, 0), (-1, 1)], 1, 2)


def test_two_datacenters_of_two_workers_train_as_two_replicas(probe_run):
    """DC replicas equal after every inner step, every rank equal after every outer step."""
    out, stdout = probe_run
    steps = STEPS
    assert "hierarchical DiLoCo: datacenter dc1 (2 of 2), rank 1 of 2 there" in stdout
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



def test_an_overlapped_exchange_keeps_replicas_equal_and_lands_before_the_end(probe_run, tmp_path):
    """diloco.overlap across datacenters: the exchange runs on a background thread over a twin
    LAN group while the next inner steps all-reduce on the datacenter's own group."""
    out, stdout = _probe(tmp_path / "overlap", "diloco.overlap=true")
    assert "(overlapped exchange)" in stdout
    probe = json.loads((out / "probe.json").read_text())
    assert [p["step"] for p in probe if p["outer"]] == [3, 6, 9]
    for p in probe:
        assert p["dc_equal"] == [True, True], p  # the background exchange never desyncs a datacenter
    # between outer steps each datacenter trains on from its own eager outer step
    assert not any(p["all_equal"] for p in probe if p["step"] > INNER)
    final = json.loads((out / "final.json").read_text())
    assert final["all_equal"] and final["exchange_thread"] == "geotrain-wan-exchange"
    # the same three exchanges as the synchronous run, byte for byte, each counted once it has
    # landed (at the next outer step), so the counters never hold part of one
    sync = json.loads((probe_run[0] / "result.json").read_text())
    assert final["wan_bytes"] == sync["bytes_sent"] > 0
    one = sync["bytes_sent"] // 3
    assert [p["wan_bytes"] for p in probe if p["outer"]] == [0, one, 2 * one]
    assert json.loads((out / "result.json").read_text())["bytes_sent"] == sync["bytes_sent"]


@pytest.mark.parametrize("override,refused", [("diloco.fragments=4", "fragments"), ("diloco.density=0.5", "density")])
def test_fragments_and_subsets_are_refused_across_datacenters(override, refused):
    from recipes.algorithms import _hierarchical
    from recipes.config import parse_config, resolve_compression

    cfg = parse_config({"model": "gpt-neo", "size": "tiny", "gradient_compression": "high"}, [override])
    with pytest.raises(TopologyError, match=f"diloco.{refused} is not available across datacenters"):
        _hierarchical(None, resolve_compression(cfg), cfg, None, None, 10)


def test_ultras_fragments_give_way_across_datacenters_and_its_error_feedback_stays_off():
    """ultra's preset fragments and no error feedback: across datacenters the model syncs whole (an
    explicit diloco.fragments is refused, above), with the preset's error feedback setting."""
    from recipes.algorithms import _hierarchical
    from recipes.algorithms.hierarchical import GroupWire, HierarchicalDiLoCo
    from recipes.config import parse_config, resolve_compression
    from recipes.models import build_model

    model, _ = build_model("gpt-neo", "tiny")
    numel = sum(p.numel() for p in model.parameters())
    for preset, feedback in (("ultra", False), ("high", True)):
        cfg = parse_config({"model": "gpt-neo", "size": "tiny", "gradient_compression": preset})
        algo = _hierarchical(model, resolve_compression(cfg), cfg, GroupWire(1, None, 0), GroupWire(1, None, 0), numel)
        assert isinstance(algo, HierarchicalDiLoCo) and algo.inner_steps == (205 if preset == "ultra" else 40)
        assert algo.exchange.reduce.feedback.enabled is feedback, preset


def test_an_exchange_in_flight_checkpoints_the_state_it_started_from():
    """One member per group (no process group needed): the background exchange gives what the
    synchronous one gives, and a checkpoint taken while it is in flight holds the error feedback
    from before it, so the resumed run's re-sent exchange starts where this one did."""
    import torch

    from recipes.algorithms.hierarchical import GroupWire, HierarchicalExchange

    def exchange():
        lan = GroupWire(1, None, 0)
        return HierarchicalExchange(1000, 4, 128, lan, GroupWire(1, None, 0), lan_exchange=lan.twin(None))

    sync, overlapped = exchange(), exchange()
    for r in range(3):
        delta = torch.randn(1000, generator=torch.Generator().manual_seed(r))
        expected = sync.finish(sync.start(delta))
        pending = overlapped.start(delta, async_op=True)
        before = overlapped.state_dict()  # taken while in flight
        if r == 0:
            assert not before["residual"].any()  # nothing was dropped before the first exchange
        got = overlapped.finish(pending)
        assert torch.equal(got, expected) and overlapped.ran_on == "geotrain-wan-exchange"
        after = overlapped.state_dict()
        assert torch.equal(after["residual"], sync.state_dict()["residual"])
        assert not torch.equal(before["residual"], after["residual"])  # the exchange moved it on


class _SlowReduce:
    """Stands in for the WAN reduce on one member: blocks until released, or fails."""

    def __init__(self, fail: bool = False) -> None:
        import threading

        self.release, self.fail = threading.Event(), fail

    def __call__(self, x):
        assert self.release.wait(30)
        if self.fail:
            raise OSError("peer went away")
        return x * 2

    def state_dict(self) -> dict:
        return {}


def test_training_goes_on_while_the_exchange_is_in_flight_and_its_error_surfaces():
    import torch

    from recipes.algorithms.hierarchical import GroupWire, HierarchicalExchange

    lan = GroupWire(1, None, 0)
    ex = HierarchicalExchange(256, 4, 128, lan, GroupWire(1, None, 0), lan_exchange=lan.twin(None))
    ex.reduce = _SlowReduce()
    pending = ex.start(torch.ones(256), async_op=True)
    assert pending.work.thread.is_alive()  # start() returned while the exchange still runs
    ex.reduce.release.set()
    assert torch.equal(ex.finish(pending), torch.full((256,), 2.0))
    ex.reduce = _SlowReduce(fail=True)
    failed = ex.start(torch.ones(256), async_op=True)
    ex.reduce.release.set()
    with pytest.raises(OSError, match="peer went away"):
        ex.start(torch.ones(256), async_op=True)  # the next exchange never starts after a failed one
    with pytest.raises(OSError, match="peer went away"):
        ex.finish(failed)


def test_a_background_exchange_is_counted_when_it_lands():
    from recipes.algorithms.hierarchical import GroupWire

    lan = GroupWire(2, None, 0)
    twin = lan.twin(None)
    twin.deferred = True
    lan.count(100)
    twin.count(40)  # in flight: not yet in the LAN total
    assert lan.bytes_sent == 100
    twin.post()
    assert lan.bytes_sent == 140
    lan.bytes_sent = 500  # a resumed run restores its total
    assert lan.bytes_sent == 500 and lan.own_bytes == 460
