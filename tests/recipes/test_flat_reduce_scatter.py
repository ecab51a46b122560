"""Flat DiLoCo's quantised exchange: reduce-scatter then all-gather, error feedback at both stages
(from 3 ranks; at 2 the all-gather of whole payloads, which sends as many bytes).

Real gloo processes (2, 3 and 4 ranks): the exchange against a plain fp32 all-reduce on random
tensors, what error feedback holds against what went in, the bytes the wire counted against what
the collectives were handed, a checkpoint taken in flight, one written before the reduce-scatter,
striped streams, and overlapped DiLoCo on top.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import pytest
import torch

from recipes.algorithms.exchange import QuantizedExchange
from recipes.algorithms.reduce_scatter import cut
from recipes.compression import block_codec
from recipes.distributed import Wire
from tests.recipes.conftest import against_fp32_mean, gloo_ranks
from tests.recipes.test_hierarchical import BOUND

ROUNDS = 6
NUMEL = 1000  # not a multiple of the blocks: the last piece ends in a partial block
CODECS = [(8, 128, False), (4, 128, False), (1, 128, False), (1, 256, True)]  # (bits, block, rotate)


def test_a_piece_cut_from_the_whole_payload_is_the_pieces_own_payload():
    x = torch.randn(NUMEL, generator=torch.Generator().manual_seed(0)) * torch.linspace(0.1, 5, NUMEL)
    for bits, block, rotate in CODECS:
        codec = block_codec(bits, block, rotate, seed=3)
        whole = codec.encode(x)
        for a, b in cut(NUMEL, 3, block):
            assert torch.equal(codec.piece(whole, NUMEL, a, b), codec.encode(x[a:b])), (bits, block, a)
    with pytest.raises(ValueError, match="block boundary"):
        block_codec(8, 128).piece(whole, NUMEL, 100, 300)


@contextmanager
def _handed(me: int):
    """The bytes the collectives are handed for other ranks while inside: an all-to-all's input less the
    split this rank keeps, an all-gather's contribution once per other rank."""
    import torch.distributed as dist

    handed = {"bytes": 0, "calls": 0}
    all_to_all, all_gather = dist.all_to_all_single, dist.all_gather

    def to_all(out, inp, out_split, in_split, group=None, async_op=False):
        handed["bytes"] += (inp.numel() - in_split[me]) * inp.element_size()
        handed["calls"] += 1
        return all_to_all(out, inp, out_split, in_split, group=group, async_op=async_op)

    def gathered(out, inp, group=None, async_op=False):
        handed["bytes"] += (len(out) - 1) * inp.numel() * inp.element_size()
        handed["calls"] += 1
        return all_gather(out, inp, group=group, async_op=async_op)

    dist.all_to_all_single, dist.all_gather = to_all, gathered
    try:
        yield handed
    finally:
        dist.all_to_all_single, dist.all_gather = all_to_all, all_gather


def _held(ex: QuantizedExchange) -> torch.Tensor:
    """What error feedback holds, as a mean: stage 1's residual of every rank / N, plus stage 2's pieces."""
    import torch.distributed as dist

    world = dist.get_world_size()
    held = ex.mean.feedback.residual / world
    a, b = ex.mean.pieces[dist.get_rank()]
    held[a:b] += ex.mean.reduce_feedback.residual
    dist.all_reduce(held)
    return held


def _rounds(rank: int, world: int, bits: int, block: int, rotate: bool, numel: int = NUMEL) -> dict:
    import torch.distributed as dist

    wire, handed = Wire(world), {"bytes": 0, "calls": 0}
    ex = QuantizedExchange(numel, bits, block, wire, seed=11, rotate=rotate)
    gen = torch.Generator().manual_seed(100 + rank)
    total_in, total_out = torch.zeros(numel), torch.zeros(numel)
    worst, top, identical, first = 0.0, 0.0, True, 0.0
    for r in range(ROUNDS):
        x = torch.randn(numel, generator=gen) * (1 + r % 3)
        with _handed(rank) as now:
            if r % 2:  # overlapped: started, stage 2 started later, landed later
                pending = ex.start(x, async_op=True)
                ex.progress(pending)
                out = ex.finish(pending)
            else:
                out = ex.finish(ex.start(x))
        handed = {k: handed[k] + now[k] for k in handed}
        same, error, amax = against_fp32_mean(x, out)
        identical, top = identical and same, max(top, amax)
        worst = max(worst, error / top)
        first = worst if r == 0 else first
        total_in += x
        total_out += out
    held = _held(ex)
    inputs = total_in.clone()
    dist.all_reduce(inputs)
    scale = float(inputs.abs().max() / world)
    codec = ex.mean.codec
    pieces = [codec.payload_bytes(hi - lo) for lo, hi in ex.mean.pieces]
    return {"identical": identical, "first": first, "worst": worst,
            "drift": float((total_out - inputs / world).abs().max() / top),
            "conservation": float((total_out + held - inputs / world).abs().max() / scale),
            "bytes": wire.bytes_sent, "handed": handed["bytes"], "calls": handed["calls"],
            "formula": ROUNDS * (codec.payload_bytes(numel) - pieces[rank] + (world - 1) * pieces[rank]),
            "payload": codec.payload_bytes(numel), "block_payload": codec.payload_bytes(block)}


def _ranks(rank: int, world: int) -> list:
    return [_rounds(rank, world, *codec) for codec in CODECS] + [_rounds(rank, world, 1, 8, False, numel=10)]


def _two(rank: int) -> list:
    return _ranks(rank, 2)


def _three(rank: int) -> list:
    return _ranks(rank, 3)


def _four(rank: int) -> list:
    return _ranks(rank, 4)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world,body", [(2, _two), (3, _three), (4, _four)])
def test_flat_quantised_exchange_is_the_fp32_mean_within_the_codecs_bound(world, body, tmp_path):
    ranks = gloo_ranks(body, tmp_path, world)
    for c, (bits, block, rotate) in enumerate([*CODECS, (1, 8, False)]):
        rows = [r[c] for r in ranks]
        for row in rows:
            assert row["identical"], (bits, row)  # every rank decoded the same mean
            # the first round is off by two quantisations (each rank's encode, the reducer's re-encode; at 2 ranks
            # the all-gather's one) at most;
            # a later one also returns what earlier rounds held back, as large again (of the largest input so far)
            assert 0 < row["first"] <= BOUND[bits] and row["worst"] <= 2 * BOUND[bits], (bits, row)
            assert row["conservation"] < 1e-5, (bits, row)  # sent + residuals == inputs: nothing dropped is lost
            assert row["drift"] <= BOUND[bits], (bits, row)  # so the running sum stays one round's error off
            # counted from the wire == what the collectives were handed for others == the payloads' sizes
            assert row["bytes"] == row["handed"] == row["formula"], (bits, row)
            # from 3 ranks a reduce-scatter and an all-gather of pieces a round; at 2 one all-gather (same bytes)
            assert row["calls"] == (2 if world > 2 else 1) * ROUNDS
        payload, rounds = rows[0]["payload"], ROUNDS
        # all ranks together: 2(N-1) payloads a round, 2(N-1)/N of one each (an all-gather: N-1 each)
        assert sum(row["bytes"] for row in rows) == rounds * 2 * (world - 1) * payload
        for row in rows:  # a rank whose piece holds a block more sends up to N-2 blocks' payload more
            assert row["bytes"] <= rounds * (2 * (world - 1) * payload / world + (world - 2) * row["block_payload"])
            if world > 2:
                assert row["bytes"] < rounds * (world - 1) * payload


def _state_rank(rank: int) -> dict:
    """A checkpoint taken while the exchange is in flight re-sends it to the same mean; one written
    before the reduce-scatter (residual only, a whole payload in flight) loads and lands its payload."""
    import torch.distributed as dist

    world = dist.get_world_size()
    gen = torch.Generator().manual_seed(7 + rank)
    ex = QuantizedExchange(NUMEL, 1, 128, Wire(world), seed=1, rotate=False)
    for _ in range(2):
        ex.finish(ex.start(torch.randn(NUMEL, generator=gen)))
    pending = ex.start(torch.randn(NUMEL, generator=gen), async_op=True)
    at_start = {k: v.clone() if torch.is_tensor(v) else v for k, v in ex.state_dict().items()}
    ex.progress(pending)  # stage 2 in flight: its residual has moved on, the checkpoint's has not
    in_flight = ex.state_dict()
    landed = ex.finish(pending)
    resumed = QuantizedExchange(NUMEL, 1, 128, Wire(world), seed=1, rotate=False)
    resumed.load_state_dict(in_flight)
    again = resumed.finish(resumed.reissue(pending.sent, async_op=True))
    same_state = all(torch.equal(at_start[k], in_flight[k]) for k in ("residual", "reduce_residual"))

    # before this change: {"residual", "syncs"} and a whole payload all-gathered
    old_residual = torch.randn(NUMEL, generator=gen)
    payload = ex.codec.encode(torch.randn(NUMEL, generator=gen))
    gathered = [torch.empty_like(payload) for _ in range(world)]
    dist.all_gather(gathered, payload)
    old_mean = torch.stack([ex.codec.decode(p, NUMEL) for p in gathered]).mean(dim=0)
    old = QuantizedExchange(NUMEL, 1, 128, Wire(world), seed=1)
    old.load_state_dict({"residual": old_residual, "syncs": 5})
    new_mean = old.finish(old.reissue(payload))
    kept = torch.equal(old.feedback.residual, old_residual)
    old_total = old_residual.clone()
    dist.all_reduce(old_total)
    reduce_held = _held(old) - old_total / world  # stage 2's pieces (stage 1's is the checkpoint's)

    # the end-of-training flush sends what both stages hold and keeps what it drops itself
    flushed = {}
    for bits in (8, 32):
        before = _held(ex)
        sent = ex.flush(bits)
        flushed[bits] = float((sent + _held(ex) - before).abs().max() / before.abs().max())
    return {"again": torch.equal(again, landed), "same_state": same_state, "flushed": flushed,
            "old_residual_kept": kept, "old_syncs": old.syncs,
            "old_mean": float((new_mean + reduce_held - old_mean).abs().max() / old_mean.abs().max())}


@pytest.mark.timeout(120)
def test_checkpoints_in_flight_and_from_before_the_reduce_scatter_resume(tmp_path):
    for row in gloo_ranks(_state_rank, tmp_path, 3):
        assert row["again"] and row["same_state"], row
        assert row["old_residual_kept"] and row["old_syncs"] == 5, row
        assert row["old_mean"] < 1e-6, row  # what the old all-gather would have given, less what stage 2 holds
        assert row["flushed"]["8"] < 1e-6 and row["flushed"]["32"] < 1e-6, row  # flushed + still held == held before


def _wires_rank(rank: int) -> dict:
    import os
    from datetime import timedelta

    import torch.distributed as dist

    from recipes.elastic_groups import ElasticWire

    gen = torch.Generator().manual_seed(rank)
    xs = [torch.randn(NUMEL, generator=gen) for _ in range(3)]
    outs = {}
    for kind in ("plain", "striped", "elastic"):
        os.environ.update(GEOTRAIN_WAN_STREAMS="2" if kind == "striped" else "1", GEOTRAIN_WAN_STREAM_MIN_BYTES="0")
        wire = Wire(3) if kind != "elastic" else ElasticWire(3)
        if kind == "elastic":  # an outer step's group as recipes.elastic makes it: a bare ProcessGroupGloo
            store = dist.PrefixStore("q/1/0/live/", dist.FileStore(os.environ["FLAT_RS_ELASTIC_STORE"], 3))
            wire.use(dist.ProcessGroupGloo(store, rank, 3, timedelta(seconds=60)))
        ex = QuantizedExchange(NUMEL, 4, 128, wire)
        outs[kind] = ([ex.finish(ex.start(x)).tolist() for x in xs], wire.bytes_sent, wire.streams is not None)
    return outs


@pytest.mark.timeout(120)
def test_striped_streams_and_an_elastic_group_send_the_same_bytes_to_the_same_mean(tmp_path, monkeypatch):
    monkeypatch.setenv("FLAT_RS_ELASTIC_STORE", str(tmp_path / "elastic-store"))
    for row in gloo_ranks(_wires_rank, tmp_path, 3):
        assert row["striped"][2] and not row["plain"][2]
        assert row["striped"][:2] == row["plain"][:2] == row["elastic"][:2]


class _Members:
    def __init__(self, world_size: int, me: int) -> None:
        self.world_size, self.me = world_size, me


def test_a_changed_group_hands_stage_twos_residual_to_the_next_mean():
    """An elastic outer step with other members (or a run resumed with another world size) cuts other
    pieces: what stage 2 held for the old piece joins this member's residual, times the new members."""
    from recipes.algorithms.reduce_scatter import QuantizedAllReduce

    mean = QuantizedAllReduce(NUMEL, 1, 128, _Members(3, 1))
    (a, b), held = mean.pieces[1], torch.randn(mean.pieces[1][1] - mean.pieces[1][0])
    mean.reduce_feedback.residual, before = held, torch.randn(NUMEL)
    mean.feedback.residual, kept = before, before.clone()
    mean.arrange(2, 0)
    expected = before.clone()
    expected[a:b] += 2 * held  # a mean over 2 members carries held once
    assert torch.equal(mean.feedback.residual, expected) and torch.equal(before, kept)  # (a loaded state unchanged)
    assert mean.pieces == [(0, 512), (512, NUMEL)] and not mean.reduce_feedback.residual.any()
    assert mean.reduce_feedback.residual.numel() == 512


def _overlapped_rank(rank: int) -> list:
    from recipes.algorithms.diloco import DiLoCo

    world, numel = 3, 300
    torch.manual_seed(0)  # every rank starts from the same weights, as a run's do
    model = torch.nn.Linear(numel, 1, bias=False)
    wire = Wire(world)
    algo = DiLoCo(model, QuantizedExchange(numel, 1, 64, wire), inner_steps=4, outer_lr=0.7,
                  outer_momentum=0.6, overlap=True, final_step=14)
    gen = torch.Generator().manual_seed(rank)
    with torch.no_grad():
        for step in range(1, 15):
            model.weight.add_(torch.randn(1, numel, generator=gen) * 0.01)
            algo.after_optimizer_step(step)
        algo.finish(14)
    codec = algo.exchange.mean.codec
    pieces = [codec.payload_bytes(b - a) for a, b in algo.exchange.mean.pieces]
    return [model.weight.flatten().tolist(), wire.bytes_sent,
            4 * (codec.payload_bytes(numel) + (world - 2) * pieces[rank])]  # syncs at 4, 8, 12 and 14 (the last)


@pytest.mark.timeout(120)
def test_overlapped_diloco_lands_the_two_stages_in_one_order_on_every_rank(tmp_path):
    ranks = gloo_ranks(_overlapped_rank, tmp_path, 3)
    assert ranks[0][0] == ranks[1][0] == ranks[2][0]  # every rank ends on the same weights
    assert all(math.isfinite(v) for v in ranks[0][0])
    for weights, sent, expected in ranks:
        assert sent == expected


def _without_feedback(rank: int) -> dict:
    """ultra's exchange (error feedback off): each round's mean on its own, quantised twice from 3 ranks."""
    import torch.distributed as dist

    world = dist.get_world_size()
    wire = Wire(world)
    ex = QuantizedExchange(NUMEL, 1, 256, wire, error_feedback=False, seed=5, rotate=True)
    gen = torch.Generator().manual_seed(300 + rank)
    worst, identical = 0.0, True
    for r in range(ROUNDS):
        x = torch.randn(NUMEL, generator=gen) * (1 + r % 3)
        pending = ex.start(x, async_op=bool(r % 2))
        out = ex.finish(pending)
        same, error, amax = against_fp32_mean(x, out)
        identical, worst = identical and same, max(worst, error / amax)
    state = ex.state_dict()
    return {"identical": identical, "worst": worst, "bytes": wire.bytes_sent, "payload": ex.codec.payload_bytes(NUMEL),
            "held": [k for k in ("residual", "reduce_residual") if state.get(k) is not None],
            "reduces": ex._reduces()}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3, 4])
def test_ultras_exchange_without_error_feedback_sends_2_n_minus_1_over_n_payloads(world, tmp_path):
    rows = gloo_ranks(_without_feedback, tmp_path, world)
    for row in rows:
        assert row["identical"] and row["held"] == [] and row["reduces"] == (world > 2), row
        # nothing carried between rounds: every round is off by its own two quantisations at most
        assert 0 < row["worst"] <= BOUND[1], row
    # all ranks together 2(N-1) payloads a round (from 3 ranks the reduce-scatter; at 2 the all-gather, N-1 = 1)
    assert sum(row["bytes"] for row in rows) == ROUNDS * 2 * (world - 1) * rows[0]["payload"]
