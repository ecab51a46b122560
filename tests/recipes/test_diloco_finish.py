"""DiLoCo's last outer step (a partial phase, or a whole phase at `final_step`) against hand-computed
examples on two real gloo ranks."""

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


def _run(rank: int, steps: int, final_step: int | None) -> list:
    model, wire = One(), Wire(2)
    algo = DiLoCo(model, FullPrecisionExchange(2, 32, wire), inner_steps=4, outer_lr=0.5, outer_momentum=0.5,
                  final_step=final_step)
    seen = []
    with torch.no_grad():
        for step in range(1, steps + 1):  # the "inner step": rank r moves every value by (r+1)*step
            model.w.add_((rank + 1) * step)
            if algo.after_optimizer_step(step):
                seen.append(model.w.tolist())
        algo.finish(steps)
    return [*seen, model.w.tolist(), algo.momentum.tolist(), wire.bytes_sent]


def _rank(rank: int) -> list:
    return _run(rank, 6, final_step=6)


def _whole_phases(rank: int) -> list:
    return [_run(rank, 8, final_step=8), _run(rank, 8, final_step=None)]


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


@pytest.mark.timeout(120)
def test_a_run_ending_on_a_whole_phase_steps_without_look_ahead_at_final_step(tmp_path):
    r0, r1 = two_gloo_ranks(_whole_phases, tmp_path)
    assert r0 == r1  # the ranks agree, with and without final_step
    ended, open_ended = r0
    # step 4 as above: 11.25, m = -15. Steps 5-8 (a whole phase, the run's last): progress 26 and 52,
    # mean pseudo-gradient -39, a plain outer step: w -= 0.5 * -39 -> 30.75; finish(8) adds nothing.
    assert ended[0] == [11.25, 11.25]
    assert ended[1] == ended[2] == [30.75, 30.75]
    assert ended[3] == [-15.0, -15.0]
    assert ended[4] == 2 * 8
    # with no final_step the sync at step 8 is an ordinary one: m = 0.5 * -15 - 39 = -46.5,
    # w -= 0.5 * (-39 + 0.5 * -46.5) -> 42.375
    assert open_ended[1] == open_ended[2] == [42.375, 42.375]
    assert open_ended[3] == [-46.5, -46.5]
    assert open_ended[4] == 2 * 8
