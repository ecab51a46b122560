"""DiLoCo's last partial phase against a hand-computed example on two real gloo ranks."""

from __future__ import annotations

import pytest
import torch

from recipes.algorithms.diloco import DiLoCo
from recipes.algorithms.exchange import FullPrecisionExchange
from recipes.distributed import Wire
from tests.recipes.conftest import two_gloo_ranks


class One(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2))


def _rank(rank: int) -> list:
    model, wire = One(), Wire(2)
    algo = DiLoCo(model, FullPrecisionExchange(2, 32, wire), inner_steps=4, outer_lr=0.5, outer_momentum=0.5)
    seen = []
    with torch.no_grad():
        for step in range(1, 7):  # the "inner step": rank r moves every value by (r+1)*step
            model.w.add_((rank + 1) * step)
            if algo.after_optimizer_step(step):
                seen.append(model.w.tolist())
        algo.finish(6)
    return [*seen, model.w.tolist(), algo.momentum.tolist(), wire.bytes_sent]


@pytest.mark.timeout(120)
def test_last_partial_phase_steps_without_momentum_look_ahead(tmp_path):
    r0, r1 = two_gloo_ranks(_rank, tmp_path)
    # steps 1-4: progress 10 (rank 0) and 20 (rank 1), mean pseudo-gradient -15. Nesterov: m = -15,
    # w -= 0.5 * (-15 + 0.5 * -15) -> 11.25. Steps 5-6 (the run ends 2 steps into a phase): progress
    # 11 and 22, mean -16.5, applied as a plain outer step: w -= 0.5 * -16.5 -> 19.5 (Nesterov would
    # have gone to 25.5: m = 0.5 * -15 - 16.5 = -24, w -= 0.5 * (-16.5 + 0.5 * -24)).
    assert r0[0] == r1[0] == [11.25, 11.25]
    assert r0[1] == r1[1] == [19.5, 19.5]
    assert r0[2] == r1[2] == [-15.0, -15.0]  # the momentum is left as the last full phase made it
    assert r0[3] == r1[3] == 2 * 8  # two fp32 all-reduces of 2 values
