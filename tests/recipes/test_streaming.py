"""Streaming DiLoCo fragments against a hand-computed example on two real gloo ranks."""

from __future__ import annotations

import pytest
import torch

from recipes.algorithms.exchange import FullPrecisionExchange
from recipes.algorithms.streaming import StreamingDiLoCo, fragment_bounds, sync_offsets
from recipes.distributed import Wire
from tests.recipes.conftest import two_gloo_ranks


def test_fragments_cut_at_parameter_boundaries_and_stagger():
    assert fragment_bounds([3, 1, 2], 2) == [(0, 3), (3, 6)]
    assert fragment_bounds([10, 10, 10, 10], 4) == [(0, 10), (10, 20), (20, 30), (30, 40)]
    assert fragment_bounds([1, 100], 3) == [(0, 1), (1, 101)]  # never more fragments than parameters
    assert fragment_bounds([5], 1) == [(0, 5)]
    assert sync_offsets(4, 2) == [0, 2] and sync_offsets(100, 4) == [0, 25, 50, 75]


class Three(torch.nn.Module):
    """Parameters a (3 values), b (1), c (2): fragments [a] and [b, c]."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Parameter(torch.zeros(n)) for n in (3, 1, 2))


def _rank(rank: int, steps: int = 7) -> list:
    torch.manual_seed(0)
    model, wire = Three(), Wire(2)
    algo = StreamingDiLoCo(model, lambda n: FullPrecisionExchange(n, 32, wire), fragments=2, inner_steps=4,
                           outer_lr=0.5, outer_momentum=0.0, final_step=steps)
    log = []
    with torch.no_grad():
        for step in range(1, steps + 1):
            for p in model.parameters():  # the "inner step": rank r moves every value by (r+1)*step
                p.add_((rank + 1) * step)
            synced = algo.due(step)
            algo.after_optimizer_step(step)
            log.append({"step": step, "synced": synced, "a": model.a.tolist(), "bc": model.b.tolist() + model.c.tolist()})
        algo.finish(steps)
    log.append({"step": "end", "a": model.a.tolist(), "bc": model.b.tolist() + model.c.tolist(),
                "bytes": wire.bytes_sent})
    return log


@pytest.mark.timeout(120)
def test_each_fragment_syncs_on_its_schedule_and_ranks_agree_at_the_end(tmp_path):
    r0, r1 = two_gloo_ranks(_rank, tmp_path)
    # H=4, F=2: fragment 0 ([a]) syncs when step % 4 == 0, fragment 1 ([b, c]) when step % 4 == 2
    assert [(e["step"], e["synced"]) for e in r0[:-1] if e["synced"]] == [(2, [1]), (4, [0]), (6, [1])]
    # By hand (outer lr 0.5, no momentum): a sync moves the global weights by 0.5 * mean(progress)
    # = 0.5 * 1.5 * (sum of the phase's steps) = 0.75 * S. Fragment 1: steps 1-2 -> 2.25,
    # 3-6 -> 2.25 + 13.5 = 15.75. Between syncs rank r holds the global value + (r+1) * steps since.
    # The run's last sync of each fragment lands on the plain average (outer lr 1): 1.5 * S,
    # fragment 1 at the end with step 7 -> 15.75 + 10.5 = 26.25, fragment 0 (steps 1-4 -> 7.5)
    # with 5-7 -> 7.5 + 27 = 34.5.
    expected = {  # step -> (rank 0's a, rank 1's a, rank 0's b/c, rank 1's b/c)
        1: (1, 2, 1, 2), 2: (3, 6, 2.25, 2.25), 3: (6, 12, 5.25, 8.25), 4: (7.5, 7.5, 9.25, 16.25),
        5: (12.5, 17.5, 14.25, 26.25), 6: (18.5, 29.5, 15.75, 15.75), 7: (25.5, 43.5, 22.75, 29.75),
    }
    for e0, e1 in zip(r0[:-1], r1[:-1]):
        a0, a1, bc0, bc1 = expected[e0["step"]]
        assert e0["a"] == [a0] * 3 and e1["a"] == [a1] * 3, e0["step"]
        assert e0["bc"] == [bc0] * 3 and e1["bc"] == [bc1] * 3, e0["step"]
    assert r0[-1]["a"] == r1[-1]["a"] == [34.5] * 3
    assert r0[-1]["bc"] == r1[-1]["bc"] == [26.25] * 3
    # fp32 all-reduce of 3 values between 2 ranks = 12 bytes per sync: [b,c] 3 syncs, [a] 2
    assert r0[-1]["bytes"] == r1[-1]["bytes"] == 5 * 12


def _eight_steps(rank: int) -> list:
    return _rank(rank, steps=8)


@pytest.mark.timeout(120)
def test_a_sync_at_the_runs_last_step_is_that_fragments_last(tmp_path):
    r0, r1 = two_gloo_ranks(_eight_steps, tmp_path)
    # fragment 0 syncs at 4 (ordinary: 7.5) and at 8, the run's last step: the plain average, 7.5 + 1.5 * (5+6+7+8)
    # = 46.5, and finish() does not sync it again; fragment 1 syncs at 2 and 6 (15.75), then 7-8 at the end: 38.25
    assert [(e["step"], e["synced"]) for e in r0[:-1] if e["synced"]] == [(2, [1]), (4, [0]), (6, [1]), (8, [0])]
    assert r0[-2]["a"] == r1[-2]["a"] == [46.5] * 3
    assert r0[-1]["a"] == r1[-1]["a"] == [46.5] * 3
    assert r0[-1]["bc"] == r1[-1]["bc"] == [38.25] * 3
    assert r0[-1]["bytes"] == r1[-1]["bytes"] == 5 * 12
