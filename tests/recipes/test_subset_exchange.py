"""The shared random subset exchange (`diloco.density`) against a hand-computed example on two
real gloo ranks: every rank sends the same positions, the rest waits in error feedback."""

from __future__ import annotations

import pytest
import torch

from recipes.algorithms.exchange import QuantizedExchange
from recipes.compression import BlockCodec
from recipes.distributed import Wire
from tests.recipes.conftest import two_gloo_ranks


def test_the_subset_is_whole_blocks_drawn_from_seed_and_sync_only():
    a = QuantizedExchange(1000, 1, 8, Wire(1), density=0.25, seed=3)  # 125 blocks of 8
    b = QuantizedExchange(1000, 1, 8, Wire(1), density=0.25, seed=3)
    first = a.positions(0)
    assert a.subset(0).numel() == 32 and first.numel() == 32 * 8  # ceil(125 / 4) blocks
    assert torch.equal(first, first.sort().values)
    assert torch.equal(first.view(-1, 8) % 8, torch.arange(8).expand(32, 8))  # whole blocks
    assert torch.equal(first, b.positions(0))  # another rank draws the same positions
    assert not torch.equal(first, a.positions(1))  # and a new subset each sync
    assert not torch.equal(first, QuantizedExchange(1000, 1, 8, Wire(1), density=0.25, seed=4).positions(0))
    covered = torch.cat([a.positions(s) for s in range(40)]).unique()
    assert covered.numel() == 1000  # 40 syncs of a quarter reach every block (each misses with ~1e-5)
    tail = QuantizedExchange(1003, 1, 8, Wire(1), density=1 / 126, seed=0)  # 126 blocks, the last of 3 values
    sizes = {tail.positions(s).numel() for s in range(300)}
    assert sizes == {8, 3} and all(tail.positions(s).max() < 1003 for s in range(300))  # never past the end
    assert QuantizedExchange(1000, 1, 8, Wire(1)).subset(0) is None  # density 1: everything, no draw
    huge = QuantizedExchange(10, 1, 8, Wire(1), density=0.5, seed=2 ** 62)  # any seed the schema takes
    assert huge.subset(5).numel() == 1


def test_a_subset_exchange_needs_error_feedback():
    ex = QuantizedExchange(64, 1, 8, Wire(1), error_feedback=False, density=0.5)
    with pytest.raises(ValueError, match="needs diloco.error_feedback: true"):
        ex.start(torch.ones(64))


def test_one_bit_scale_counts_only_the_values_a_block_holds():
    codec = BlockCodec(1, 8)
    x = torch.tensor([2.0, -4.0, 3.0])  # one block, 5 values of padding
    assert torch.equal(codec.decode(codec.encode(x), 3), torch.tensor([3.0, -3.0, 3.0]))


def _rank(rank: int) -> dict:
    wire = Wire(2)
    ex = QuantizedExchange(32, 1, 8, wire, density=0.5, seed=7)  # 4 blocks of 8; 2 go each sync
    ones = torch.ones(32)
    avg0 = ex.finish(ex.start(ones * (rank + 1)))  # sync 0
    residual0 = ex.feedback.residual.tolist()
    pending1 = ex.start(ones * (rank + 1), async_op=True)  # sync 1, in flight
    state = ex.state_dict()
    pending2 = ex.start(torch.zeros(32), async_op=True)  # sync 2 started before sync 1 is landed
    avg1, avg2 = ex.finish(pending1), ex.finish(pending2)
    again = QuantizedExchange(32, 1, 8, wire, density=0.5, seed=7)
    again.load_state_dict(state)
    reissued = again.finish(again.reissue(pending1.sent))  # a resumed run re-sends sync 1 as it was
    return {"s0": ex.positions(0).tolist(), "s1": ex.positions(1).tolist(), "s2": ex.positions(2).tolist(),
            "avg0": avg0.tolist(), "residual0": residual0, "avg1": avg1.tolist(), "avg2": avg2.tolist(),
            "residual2": ex.feedback.residual.tolist(), "resumed_syncs": again.syncs, "reissued": reissued.tolist(),
            "bytes": wire.bytes_sent}


@pytest.mark.timeout(120)
def test_ranks_send_the_same_positions_and_error_feedback_keeps_the_rest(tmp_path):
    r0, r1 = two_gloo_ranks(_rank, tmp_path)
    s0, s1, s2 = r0["s0"], r0["s1"], r0["s2"]
    assert (s0, s1, s2) == (r1["s0"], r1["s1"], r1["s2"]) and len(s0) == len(s1) == 16
    assert s0 != s1  # with seed 7 the second sync sends other blocks (so the example below means something)
    # Sync 0: rank r sends r+1 at s0 (sign x mean |x| is exact for equal magnitudes); the average is
    # 1.5 there and 0 elsewhere; the residual keeps r+1 where nothing was sent and 0 where it was.
    assert r0["avg0"] == r1["avg0"] == [1.5 if i in s0 else 0.0 for i in range(32)]
    assert r0["residual0"] == [0.0 if i in s0 else 1.0 for i in range(32)]
    assert r1["residual0"] == [0.0 if i in s0 else 2.0 for i in range(32)]
    # Sync 1: target = (r+1) on s0's blocks and 2(r+1) on the others; each block is one magnitude, so
    # s1's blocks arrive exact and average to 1.5 (sent at sync 0 too) or 3 (waited since sync 0).
    assert r0["avg1"] == r1["avg1"] == [(1.5 if i in s0 else 3.0) if i in s1 else 0.0 for i in range(32)]
    # Sync 2 sends only zeros of its own, so it carries what waited: decoded on sync 2's positions only
    assert all(r0["avg2"][i] == 0.0 for i in range(32) if i not in s2)
    left = [(1.0 if i in s0 else 2.0) if i not in s1 else 0.0 for i in range(32)]  # rank 0 after sync 1
    # (a block of zeros goes as +tiny, the smallest scale: never 0/0 on the wire)
    assert r0["residual2"] == pytest.approx([0.0 if i in s2 else left[i] for i in range(32)], abs=1e-37)
    assert r0["avg2"] == pytest.approx([(left[i] * 1.5 if i in s2 else 0.0) for i in range(32)], abs=1e-37)
    assert r1["residual2"] == pytest.approx([0.0 if i in s2 else 2 * left[i] for i in range(32)], abs=1e-37)
    assert r1["avg2"] == r0["avg2"]
    assert r0["resumed_syncs"] == r1["resumed_syncs"] == 2
    assert r0["reissued"] == r1["reissued"] == r0["avg1"]  # decoded with sync 1's subset, not a new one
    # four all-gathers of 16 sign bits (2 bytes) + two fp32 scales, to one other rank
    assert r0["bytes"] == r1["bytes"] == 4 * BlockCodec(1, 8).payload_bytes(16) == 40


@pytest.mark.parametrize("preset,extra", [("low", []), ("high", ["algorithm=demo"]), ("none", [])])
def test_a_subset_of_an_exchange_that_cannot_take_one_is_refused_not_ignored(preset, extra):
    from recipes.algorithms import build_algorithm
    from recipes.config import parse_config, resolve_compression

    cfg = parse_config({"model": "gpt-neo", "size": "tiny", "gradient_compression": preset},
                       ["diloco.density=0.1", *extra])
    with pytest.raises(ValueError, match="diloco.density 0.1 needs a DiLoCo exchange of 8, 4 or 1 bits"):
        build_algorithm(torch.nn.Linear(2, 2), resolve_compression(cfg), cfg, Wire(1))
